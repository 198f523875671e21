//! The queue's tunables, with the command-line form `key=value,…` so ablations can be rerun.

/// Tunables of the queue order (see the module doc for what each does).
#[derive(Debug, Clone, PartialEq)]
pub struct QueueWeights {
    /// Service below which a job is in band 0, GPU-seconds.
    pub band_base_gpu_s: f64,
    /// Each further band spans this factor of service (> 1).
    pub band_factor: f64,
    /// Bands beyond the first (the last band is open-ended).
    pub bands: u32,
    /// Seconds of waiting that add one priority level (0 = no aging).
    pub aging_s: f64,
    /// Half-life of the decayed usage behind fair share, seconds.
    pub half_life_s: f64,
    /// Extra GPUs a team may borrow beyond its guarantee, as a fraction of the cluster.
    pub borrow_limit: f64,
    /// Whether fair share orders jobs of equal band (0 = off, 1 = on).
    pub fair_share: bool,
    /// Hysteresis: a running job ranks one band below its own, so crossing a threshold does not
    /// cost it its GPUs at once.
    pub sticky: bool,
    /// Within a band, jobs keep FIFO order whether running or waiting, so a job that backfilled
    /// past a blocked one gives its GPUs back when the earlier job fits (as Tiresias does). Off:
    /// running jobs rank before every waiting job of their band, and a blocked wide job waits
    /// until backfills stop arriving.
    pub backfill_yields: bool,
    /// Fair share compares teams in geometric steps of this factor of decayed usage (over the
    /// least-used team's, plus one GPU-hour), so usage that differs by less is a tie and FIFO
    /// decides; ≤ 1 compares exact usage (which reorders jobs every round).
    pub share_step: f64,
    /// Simulator only: the fraction of the cluster guaranteed to teams, split evenly.
    pub team_guarantee: f64,
    /// Once a gang of several workers is blocked, no waiting job starts unless it leaves the
    /// gang's GPUs free, so a stream of small jobs cannot starve it (the server turns it on; off
    /// by default so the simulator's published figures stay as measured).
    pub gang_reservation: bool,
}

impl Default for QueueWeights {
    fn default() -> Self {
        Self {
            band_base_gpu_s: 14_400.0,
            band_factor: 4.0,
            bands: 2,
            aging_s: 86_400.0,
            half_life_s: 7.0 * 86_400.0,
            borrow_limit: 1.0,
            fair_share: true,
            team_guarantee: 1.0,
            sticky: false,
            backfill_yields: true,
            share_step: 4.0,
            gang_reservation: false,
        }
    }
}

impl QueueWeights {
    /// Parses `key=value,…` over the defaults; keys are the field names.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut w = Self::default();
        for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').ok_or_else(|| format!("`{pair}` is not key=value"))?;
            let v: f64 =
                value.trim().parse().map_err(|_| format!("`{value}` is not a number (in `{pair}`)"))?;
            if !v.is_finite() || v < 0.0 {
                return Err(format!("`{pair}`: values must be finite and non-negative"));
            }
            match key.trim() {
                "band_base_gpu_s" => w.band_base_gpu_s = v,
                "band_factor" if v > 1.0 => w.band_factor = v,
                "band_factor" => return Err("band_factor must be greater than 1".into()),
                "bands" => w.bands = v as u32,
                "aging_s" => w.aging_s = v,
                "half_life_s" if v > 0.0 => w.half_life_s = v,
                "half_life_s" => return Err("half_life_s must be positive".into()),
                "borrow_limit" => w.borrow_limit = v,
                "fair_share" => w.fair_share = v != 0.0,
                "sticky" => w.sticky = v != 0.0,
                "backfill_yields" => w.backfill_yields = v != 0.0,
                "share_step" => w.share_step = v,
                "gang_reservation" => w.gang_reservation = v != 0.0,
                "team_guarantee" if v <= 1.0 => w.team_guarantee = v,
                "team_guarantee" => return Err("team_guarantee is a fraction of the cluster, 0 to 1".into()),
                other => {
                    return Err(format!(
                        "unknown weight `{other}`; known: band_base_gpu_s, band_factor, bands, aging_s, \
                         half_life_s, borrow_limit, fair_share, sticky, backfill_yields, share_step, team_guarantee, gang_reservation"
                    ));
                }
            }
        }
        Ok(w)
    }

    /// The attained-service band of `gpu_s` (0 = least served).
    pub fn band(&self, gpu_s: f64) -> u32 {
        if gpu_s < self.band_base_gpu_s || self.bands == 0 {
            return 0;
        }
        let above = (gpu_s / self.band_base_gpu_s.max(1e-9)).log(self.band_factor).floor();
        (above.max(0.0) as u32 + 1).min(self.bands)
    }
}
