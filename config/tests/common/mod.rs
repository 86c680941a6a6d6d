//! What the configuration tests of certificates share: a directory with the example's
//! secrets and a small PKI of the test's own.

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, SanType};

/// The example configuration shipped with the crate.
pub const EXAMPLE: &str = include_str!("../../termgate.example.toml");

/// A directory with the example's secrets and, in `pki/`, a CA (`ca.pem`), control's
/// and a gateway's certificate for localhost and 127.0.0.1 (`control.pem`,
/// `control-key.pem`, `gateway.pem`, `gateway-key.pem`) and a file that holds none
/// (`not-a-cert.pem`).
pub fn dir_with_pki() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("secrets")).unwrap();
    std::fs::write(dir.path().join("secrets/hs256.key"), "k".repeat(48) + "\n").unwrap();
    std::fs::write(dir.path().join("secrets/service.token"), "s".repeat(32)).unwrap();
    let pki = dir.path().join("pki");
    std::fs::create_dir(&pki).unwrap();
    let mut ca = CertificateParams::default();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca = ca.self_signed(&ca_key).unwrap();
    std::fs::write(pki.join("ca.pem"), ca.pem()).unwrap();
    for role in ["control", "gateway"] {
        let mut leaf =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        leaf.subject_alt_names.push(SanType::URI(
            format!("spiffe://termgate/{role}/{role}")
                .try_into()
                .unwrap(),
        ));
        let key = KeyPair::generate().unwrap();
        let cert = leaf.signed_by(&key, &ca, &ca_key).unwrap();
        std::fs::write(pki.join(format!("{role}.pem")), cert.pem()).unwrap();
        std::fs::write(pki.join(format!("{role}-key.pem")), key.serialize_pem()).unwrap();
    }
    std::fs::write(pki.join("not-a-cert.pem"), "hello\n").unwrap();
    dir
}
