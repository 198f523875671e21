//! Seeded, stateless noise: the same seed, GPU, channel and time always give the same value,
//! whatever order the caller asks in.

/// SplitMix64 finaliser: a good 64-bit mix for hashing small keys.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Uniform noise in [-1, 1) for `(seed, gpu, channel, millis)`.
pub(crate) fn noise(seed: u64, gpu: u32, channel: u32, millis: u64) -> f64 {
    let h = mix(seed ^ mix(u64::from(gpu) << 32 | u64::from(channel)) ^ mix(millis));
    // 53 random bits into [0, 1), then onto [-1, 1).
    let unit = (h >> 11) as f64 / (1u64 << 53) as f64;
    unit * 2.0 - 1.0
}
