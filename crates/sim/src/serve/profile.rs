//! Serving profiles: one replica of a model on a GPU type at a tensor-parallel degree.
//!
//! The numbers are those of `serving-profiles.md` §3 (the parametric iteration model
//! `T = α + β·P + γ·Σp² + δ·D + ε·K`, fitted to Splitwise's measurements or published by
//! DistServe) and §1 (KV capacity in sequences, vLLM's `max_num_seqs` cap of 256). The cold
//! start is that document's derived default, `T_engine + W / BW_load`, with `T_engine` = 50 s
//! (the middle of its 35–65 s with warm caches) and `BW_load` = 3 GB/s (safetensors from local
//! NVMe, its 2–4 GB/s): 96 s for Llama2-70B, 59 s for OPT-13B.

use gantry_core::autoscale::ReplicaModel;

/// One replica's latency model, KV capacity and cold start.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// `MODEL-GPU-tpN`.
    pub name: String,
    /// GPUs per replica (the TP degree).
    pub gpus: u32,
    /// Iteration intercept without prefill, seconds.
    pub alpha_d: f64,
    /// Iteration intercept with prefill tokens, seconds.
    pub alpha_p: f64,
    /// Seconds per prefill token.
    pub beta: f64,
    /// Seconds per squared prefill-chunk token.
    pub gamma: f64,
    /// Seconds per decoding sequence.
    pub delta: f64,
    /// Seconds per KV token of decoding sequences.
    pub epsilon: f64,
    /// Sequences that fit in KV cache at once.
    pub kv_seqs: u32,
    /// Seconds from start to ready.
    pub cold_start_s: f64,
}

/// (name, GPUs, α_d, α_p, β, γ, δ, ε in ms, KV sequences, weights GB).
type Row = (&'static str, u32, f64, f64, f64, f64, f64, f64, u32, f64);

const ROWS: &[Row] = &[
    ("llama2-70b-a100-tp2", 2, 56.7, 38.4, 0.311, 6.8e-6, 0.43, 1.4e-4, 12, 138.0),
    ("llama2-70b-a100-tp4", 4, 43.3, 41.5, 0.157, 14.6e-6, 0.18, 3.7e-4, 256, 138.0),
    ("llama2-70b-a100-tp8", 8, 44.1, 48.8, 0.087, 12.6e-6, 0.19, 3.4e-4, 256, 138.0),
    ("llama2-70b-h100-tp2", 2, 36.8, 27.2, 0.118, 6.0e-6, 0.41, 0.6e-4, 12, 138.0),
    ("llama2-70b-h100-tp4", 4, 28.8, 35.7, 0.060, 7.3e-6, 0.26, 1.0e-4, 256, 138.0),
    ("llama2-70b-h100-tp8", 8, 29.9, 46.4, 0.022, 10.5e-6, 0.20, 1.8e-4, 256, 138.0),
    ("bloom-176b-a100-tp8", 8, 48.0, 53.0, 0.196, 28e-6, 0.44, 4.1e-4, 31, 329.0),
    ("bloom-176b-h100-tp8", 8, 35.6, 33.5, 0.081, 14e-6, 0.30, 1.6e-4, 31, 329.0),
    ("opt-13b-a100-tp1", 1, 23.5, 22.1, 0.141, 8.1e-6, 0.061, 5.9e-4, 32, 26.0),
    ("opt-13b-a100-tp2", 2, 24.5, 27.4, 0.091, 8.5e-6, 0.087, 2.2e-4, 79, 26.0),
    ("opt-13b-a100-tp4", 4, 25.9, 30.5, 0.052, 0.4e-6, 0.055, 0.8e-4, 172, 26.0),
    ("opt-66b-a100-tp4", 4, 39.6, 43.0, 0.213, 4.6e-5, 0.136, 6.9e-4, 38, 132.0),
    ("opt-66b-a100-tp8", 8, 31.2, 38.9, 0.157, 4.5e-6, 0.068, 2.8e-4, 102, 132.0),
    ("llama2-7b-a100-tp1", 1, 12.1, 12.1, 0.062, 5.2e-6, 0.06, 3.8e-4, 55, 13.5),
    ("llama2-7b-h100-tp1", 1, 7.3, 7.3, 0.021, 1.8e-6, 0.06, 2.3e-4, 55, 13.5),
    ("llama3-8b-a100-tp1", 1, 12.6, 12.6, 0.063, 5.2e-6, 0.06, 0.95e-4, 210, 16.1),
];

/// The default profile.
pub const DEFAULT_PROFILE: &str = "llama2-70b-h100-tp4";

/// Engine start (compile, graph capture, profiling) in seconds, with warm caches.
const ENGINE_S: f64 = 50.0;
/// Weight loading bandwidth from local NVMe, GB/s.
const LOAD_GB_S: f64 = 3.0;

/// The sizes Gantry's capacity model assumes for a typical request: the mean context and
/// output the profile document normalises KV capacity with (2,048 + 28 tokens).
pub const TYPICAL_PROMPT: u32 = 2048;
/// See [`TYPICAL_PROMPT`].
pub const TYPICAL_OUTPUT: u32 = 28;
/// Prefill tokens one iteration takes (chunked prefill, vLLM's `max_num_batched_tokens`).
pub const CHUNK_TOKENS: u32 = 4096;

impl Profile {
    /// The profile called `name`, or a sentence listing the known ones.
    pub fn named(name: &str) -> Result<Self, String> {
        let row = ROWS.iter().find(|r| r.0 == name.trim().to_ascii_lowercase()).ok_or_else(|| {
            let names: Vec<&str> = ROWS.iter().map(|r| r.0).collect();
            format!("unknown profile `{name}`; known profiles: {}", names.join(", "))
        })?;
        let ms = 1e-3;
        Ok(Self {
            name: row.0.to_string(),
            gpus: row.1,
            alpha_d: row.2 * ms,
            alpha_p: row.3 * ms,
            beta: row.4 * ms,
            gamma: row.5 * ms,
            delta: row.6 * ms,
            epsilon: row.7 * ms,
            kv_seqs: row.8,
            cold_start_s: ENGINE_S + row.9 / LOAD_GB_S,
        })
    }

    /// Every known profile name.
    pub fn names() -> impl Iterator<Item = &'static str> {
        ROWS.iter().map(|r| r.0)
    }

    /// One iteration: prefill chunks `chunks` (tokens each), `decoding` sequences holding `kv`
    /// tokens of context.
    pub fn iteration_s(&self, prefill: u64, prefill_sq: f64, decoding: usize, kv: u64) -> f64 {
        let alpha = if prefill > 0 { self.alpha_p } else { self.alpha_d };
        alpha
            + self.beta * prefill as f64
            + self.gamma * prefill_sq
            + self.delta * decoding as f64
            + self.epsilon * kv as f64
    }

    /// Gantry's model of this replica for a TTFT SLO: a typical request's prefill alone (its
    /// inverse is the rate a busy replica serves), and its decode in a batch of 16 (see
    /// [`ReplicaModel::from_service_times`]).
    pub fn replica_model(&self, slo_ttft_s: f64) -> ReplicaModel {
        let p = u64::from(TYPICAL_PROMPT);
        let chunks = p.div_ceil(u64::from(CHUNK_TOKENS));
        let chunk = (p / chunks) as f64;
        let prefill =
            chunks as f64 * self.alpha_p + self.beta * p as f64 + self.gamma * chunk * chunk * chunks as f64;
        let batch = 16;
        let kv = u64::from(TYPICAL_PROMPT + TYPICAL_OUTPUT) * batch as u64;
        let decode = f64::from(TYPICAL_OUTPUT) * self.iteration_s(0, 0.0, batch, kv);
        ReplicaModel::from_service_times(prefill, decode, slo_ttft_s, self.cold_start_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_profile_prefills_2048_tokens_in_about_200_ms() {
        let p = Profile::named(DEFAULT_PROFILE).expect("known");
        let t = p.iteration_s(2048, 2048.0 * 2048.0, 0, 0);
        assert!((t - 0.201).abs() < 0.02, "Splitwise measured 201 ms, the fit gives {t}");
        assert!((p.cold_start_s - 96.0).abs() < 1.0);
    }

    #[test]
    fn an_unknown_profile_lists_the_known_ones() {
        let e = Profile::named("gpt5-b200-tp64").expect_err("unknown");
        assert!(e.contains("opt-13b-a100-tp1"), "{e}");
    }
}
