//! Content digests: `sha256:` and 64 lowercase hex digits (the only algorithm accepted).

use std::fmt;

use sha2::Digest as _;

/// A `sha256:` digest, checked.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(String);

impl Digest {
    /// Parses `sha256:<64 lowercase hex>`; anything else is refused with a sentence.
    pub fn parse(text: &str) -> Result<Self, String> {
        let hex = text
            .strip_prefix("sha256:")
            .ok_or_else(|| format!("`{text}` is not a digest: only sha256:… is accepted"))?;
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            return Err(format!("`{text}` is not a sha256 digest (64 lowercase hex digits)"));
        }
        Ok(Self(text.to_owned()))
    }

    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self::from_hasher(sha2::Sha256::new_with_prefix(bytes))
    }

    /// The digest a hasher has computed.
    pub fn from_hasher(hasher: sha2::Sha256) -> Self {
        let hex: String = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
        Self(format!("sha256:{hex}"))
    }

    /// The 64 hex digits (a file name in the store).
    pub fn hex(&self) -> &str {
        &self.0["sha256:".len()..]
    }

    /// The whole digest, `sha256:…`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_well_formed_sha256_digests_parse() {
        let d = Digest::of(b"hello");
        assert_eq!(d.as_str(), "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824");
        assert_eq!(Digest::parse(d.as_str()), Ok(d.clone()));
        assert_eq!(d.hex().len(), 64);
        for bad in [
            "sha512:00",
            "2cf24dba",
            "sha256:../../etc/passwd",
            "sha256:2CF24DBA5FB0A30E26E83B2AC5B9E29E1B161E5C1FA7425E73043362938B9824",
        ] {
            assert!(Digest::parse(bad).is_err(), "{bad}");
        }
    }
}
