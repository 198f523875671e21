//! Elastic jobs: a GPU count given as a range, `--gpus 2..8`.
//!
//! An elastic job runs on one node with any number of whole GPUs from its minimum to its
//! maximum; the scheduler starts it at the minimum, gives it idle GPUs when nothing waits for
//! them, and shrinks it back toward the minimum when a waiting job needs them. Each resize
//! stops the job (SIGTERM, the grace period: the checkpoint signal) and starts a new attempt
//! with `WORLD_SIZE` and `CUDA_VISIBLE_DEVICES` matching its new width. On the wire the range
//! is two fields, `gpus` (the minimum, so a client that knows nothing of ranges reads the
//! job as the rigid job it is at least) and `gpus_max`.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Whole GPUs asked for: a count (`4`) or an elastic range (`2..8`, both ends included).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GpuRange {
    /// Fewest GPUs (the count, for a rigid job).
    pub min: u32,
    /// Most GPUs; `None` for a rigid job.
    pub max: Option<u32>,
}

impl GpuRange {
    /// A rigid job's count.
    pub const fn count(n: u32) -> Self {
        Self { min: n, max: None }
    }

    /// Parses `N` or `MIN..MAX`. Only the syntax is checked here (and that the range is not
    /// empty or from 0); the server checks the rest against its nodes.
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let number = |s: &str| {
            s.trim().parse::<u32>().map_err(|_| {
                format!("`{text}` is not a GPU count: give a number (4) or a range MIN..MAX (2..8)")
            })
        };
        let Some((lo, hi)) = t.split_once("..") else {
            return Ok(Self { min: number(t)?, max: None });
        };
        let range = Self { min: number(lo)?, max: Some(number(hi.strip_prefix('=').unwrap_or(hi))?) };
        range.check().map(|()| range)
    }

    /// The rules every range follows: at least one GPU, the minimum no larger than the maximum.
    pub fn check(&self) -> Result<(), String> {
        match self.max {
            Some(_) if self.min == 0 => {
                Err("an elastic job needs at least 1 GPU: the range must start at 1 or more (e.g. 1..4)"
                    .into())
            }
            Some(max) if max < self.min => Err(format!(
                "the range {}..{max} is empty: the minimum must not exceed the maximum (e.g. {max}..{})",
                self.min, self.min
            )),
            _ => Ok(()),
        }
    }

    /// Whether it is a range (an elastic job), even a range of one width such as `2..2`.
    pub fn is_elastic(&self) -> bool {
        self.max.is_some()
    }
}

impl fmt::Display for GpuRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.max {
            Some(max) => write!(f, "{}..{max}", self.min),
            None => write!(f, "{}", self.min),
        }
    }
}

/// A count is written as a number (as before ranges existed), a range as `"MIN..MAX"`.
impl Serialize for GpuRange {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.max {
            None => s.serialize_u32(self.min),
            Some(_) => s.serialize_str(&self.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for GpuRange {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Count(u32),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Count(n) => Ok(Self { min: n, max: None }),
            Raw::Text(t) => Self::parse(&t).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_and_a_range_parse_and_print_back() {
        assert_eq!(GpuRange::parse("4"), Ok(GpuRange { min: 4, max: None }));
        assert_eq!(GpuRange::parse("2..8"), Ok(GpuRange { min: 2, max: Some(8) }));
        assert_eq!(GpuRange::parse("2..=8"), Ok(GpuRange { min: 2, max: Some(8) }));
        assert_eq!(GpuRange::parse("2..8").map(|r| r.to_string()), Ok("2..8".to_owned()));
    }

    #[test]
    fn an_empty_range_or_one_from_zero_is_refused_with_a_sentence() {
        assert!(GpuRange::parse("8..2").expect_err("empty").contains("must not exceed"));
        assert!(GpuRange::parse("0..4").expect_err("from 0").contains("at least 1 GPU"));
        assert!(GpuRange::parse("two").expect_err("word").contains("not a GPU count"));
        assert!(GpuRange::parse("2..").is_err() && GpuRange::parse("..2").is_err());
    }

    #[test]
    fn a_count_serialises_as_a_number_and_a_range_as_text() {
        let count: GpuRange = serde_json::from_str("2").expect("number");
        let range: GpuRange = serde_json::from_str("\"1..4\"").expect("text");
        assert_eq!((count, range), (GpuRange { min: 2, max: None }, GpuRange { min: 1, max: Some(4) }));
        assert_eq!(serde_json::to_string(&count).expect("json"), "2");
        assert_eq!(serde_json::to_string(&range).expect("json"), "\"1..4\"");
        assert!(serde_json::from_str::<GpuRange>("\"4..1\"").is_err());
    }
}
