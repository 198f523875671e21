//! Decayed GPU usage per team: the memory behind fair share (Slurm's multifactor "fair-share"
//! factor, with an exponential half-life instead of fixed decay periods).

/// Per-team GPU-seconds, decayed with a half-life. Time is passed in; nothing reads a clock.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Usage {
    gpu_s: Vec<f64>,
    at_s: f64,
}

impl Usage {
    /// No usage yet, for `teams` teams, at time `now_s`.
    pub fn new(teams: usize, now_s: f64) -> Self {
        Self { gpu_s: vec![0.0; teams], at_s: now_s }
    }

    /// Decays everything to `now_s` (a time before the last update changes nothing).
    pub fn decay_to(&mut self, now_s: f64, half_life_s: f64) {
        let dt = now_s - self.at_s;
        if dt <= 0.0 {
            return;
        }
        let f = 0.5f64.powf(dt / half_life_s.max(1e-9));
        for u in &mut self.gpu_s {
            *u *= f;
        }
        self.at_s = now_s;
    }

    /// Adds `gpu_s` GPU-seconds to `team` (growing the table for a new team).
    pub fn charge(&mut self, team: usize, gpu_s: f64) {
        if team >= self.gpu_s.len() {
            self.gpu_s.resize(team + 1, 0.0);
        }
        self.gpu_s[team] += gpu_s.max(0.0);
    }

    /// The team's decayed usage.
    pub fn of(&self, team: usize) -> f64 {
        self.gpu_s.get(team).copied().unwrap_or(0.0)
    }
}
