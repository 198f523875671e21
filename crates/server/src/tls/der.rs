//! Just enough DER to read a certificate's subject common name, so the listener can tell which
//! node a verified client certificate belongs to without a full X.509 parser (x509-parser
//! would add a dozen crates for one field). Only certificates that rustls has already verified
//! against the cluster CA reach this code; anything unexpected yields `None`, never a panic.

/// Tag of a SEQUENCE.
const SEQUENCE: u8 = 0x30;
/// Tag of a SET.
const SET: u8 = 0x31;
/// Tag of an OBJECT IDENTIFIER.
const OID: u8 = 0x06;
/// Tag of the INTEGER serial number.
const INTEGER: u8 = 0x02;
/// Tag of the explicit `[0]` version field.
const VERSION: u8 = 0xa0;
/// id-at-commonName, 2.5.4.3.
const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];

/// One tag-length-value: `(tag, content, rest)`. Multi-byte tags and indefinite lengths (not
/// allowed in DER) are refused.
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, after_tag) = input.split_first()?;
    if tag & 0x1f == 0x1f {
        return None;
    }
    let (&first, after_len) = after_tag.split_first()?;
    let (len, body) = if first < 0x80 {
        (usize::from(first), after_len)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || after_len.len() < n {
            return None;
        }
        let (bytes, body) = after_len.split_at(n);
        (bytes.iter().fold(0usize, |acc, &b| (acc << 8) | usize::from(b)), body)
    };
    if body.len() < len {
        return None;
    }
    let (content, rest) = body.split_at(len);
    Some((tag, content, rest))
}

/// The content of the next element if it has tag `want`, and what follows it.
fn expect(input: &[u8], want: u8) -> Option<(&[u8], &[u8])> {
    let (tag, content, rest) = tlv(input)?;
    (tag == want).then_some((content, rest))
}

/// The subject of a DER certificate, and what follows it in the to-be-signed part.
fn subject(cert: &[u8]) -> Option<(&[u8], &[u8])> {
    let (certificate, _) = expect(cert, SEQUENCE)?;
    let (tbs, _) = expect(certificate, SEQUENCE)?;
    let mut rest = tbs;
    if let Some((VERSION, _, after)) = tlv(rest) {
        rest = after;
    }
    let (_, rest) = expect(rest, INTEGER)?;
    let (_, rest) = expect(rest, SEQUENCE)?; // signature algorithm
    let (_, rest) = expect(rest, SEQUENCE)?; // issuer
    let (_, rest) = expect(rest, SEQUENCE)?; // validity
    expect(rest, SEQUENCE)
}

/// The SubjectPublicKeyInfo of a DER certificate, whole (tag and length included): what a
/// public-key pin hashes.
pub(super) fn subject_public_key_info(cert: &[u8]) -> Option<&[u8]> {
    let (_, rest) = subject(cert)?;
    let (_, _, after) = tlv(rest)?;
    let (tag, _, _) = tlv(rest)?;
    (tag == SEQUENCE).then(|| &rest[..rest.len() - after.len()])
}

/// The first common name in the subject of a DER certificate.
pub(super) fn subject_common_name(cert: &[u8]) -> Option<String> {
    let (mut subject, _) = subject(cert)?;
    while !subject.is_empty() {
        let (mut rdn, next) = expect(subject, SET)?;
        subject = next;
        while !rdn.is_empty() {
            let (attribute, next) = expect(rdn, SEQUENCE)?;
            rdn = next;
            let (oid, value) = expect(attribute, OID)?;
            if oid == COMMON_NAME {
                return string(value);
            }
        }
    }
    None
}

/// UTF8String, PrintableString or IA5String as text.
fn string(value: &[u8]) -> Option<String> {
    let (tag, content, _) = tlv(value)?;
    match tag {
        0x0c | 0x13 | 0x16 => String::from_utf8(content.to_vec()).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert_with_cn(cn: &str) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).expect("params");
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(rcgen::DnType::OrganizationName, "Gantry");
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        let key = rcgen::KeyPair::generate().expect("key");
        params.self_signed(&key).expect("cert").der().to_vec()
    }

    #[test]
    fn the_common_name_is_read_from_a_generated_certificate() {
        assert_eq!(subject_common_name(&cert_with_cn("node-a")).as_deref(), Some("node-a"));
        assert_eq!(subject_common_name(&cert_with_cn("gpu_07.rack-3")).as_deref(), Some("gpu_07.rack-3"));
    }

    #[test]
    fn a_certificate_without_a_common_name_has_none() {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).expect("params");
        params.distinguished_name = rcgen::DistinguishedName::new();
        let key = rcgen::KeyPair::generate().expect("key");
        let der = params.self_signed(&key).expect("cert").der().to_vec();
        assert_eq!(subject_common_name(&der), None);
    }

    #[test]
    fn the_public_key_info_read_is_the_one_the_key_pair_holds() {
        use rcgen::PublicKeyData;
        let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).expect("params");
        let key = rcgen::KeyPair::generate().expect("key");
        let der = params.self_signed(&key).expect("cert").der().to_vec();
        assert_eq!(subject_public_key_info(&der), Some(key.subject_public_key_info().as_slice()));
    }

    #[test]
    fn truncated_or_garbage_input_yields_none_without_panicking() {
        let der = cert_with_cn("node-a");
        for cut in 0..der.len() {
            let _ = subject_common_name(&der[..cut]);
            let _ = subject_public_key_info(&der[..cut]);
        }
        assert_eq!(subject_common_name(&[]), None);
        assert_eq!(subject_common_name(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
        assert_eq!(subject_common_name(b"not a certificate"), None);
    }
}
