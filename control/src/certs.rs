//! `termgate-control certs`: a deployment's small CA and the certificates its parts
//! present to each other (docs/hosts.md "More than one host").
//!
//! `init` makes the CA (`ca.pem`, `ca-key.pem`) in a directory; `issue` makes one
//! part's certificate and key (`<role>-<name>.pem`, `<role>-<name>-key.pem`), its
//! identity the URI SAN `spiffe://termgate/<role>/<name>` ([`config::pki::PeerId`]) and
//! its DNS or IP SANs from `--name` and every `--san`. Keys are written 0600, each file
//! through a temporary file renamed into place, the key before the certificate: a
//! part that picks up a renewal never reads half a file, and keeps the pair in use
//! until the new one matches. An operator's own PKI works the same way: any CA, any
//! leaf with that URI SAN.

use std::io::Write as _;
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use config::pki::{PeerId, PeerRole};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};

/// The CA's certificate file in a certs directory.
pub const CA_FILE: &str = "ca.pem";
/// The CA's key file in a certs directory.
pub const CA_KEY_FILE: &str = "ca-key.pem";

/// How long the CA lasts unless told, days.
pub const CA_DAYS: u32 = 3650;
/// How long a part's certificate lasts unless told, days: renewed by issuing again.
pub const LEAF_DAYS: u32 = 90;

/// Makes a CA in `dir`; refuses to replace one (every certificate it issued would stop
/// verifying).
pub fn init(dir: &Path, days: u32) -> anyhow::Result<PathBuf> {
    let cert_path = dir.join(CA_FILE);
    if cert_path.exists() || dir.join(CA_KEY_FILE).exists() {
        bail!(
            "{} already holds a CA; remove it first to start over (every certificate it issued then stops verifying)",
            dir.display()
        );
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, "termgate CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut params, days)?;
    let key = KeyPair::generate().context("cannot make the CA's key")?;
    let cert = params
        .self_signed(&key)
        .context("cannot sign the CA's certificate")?;
    write_atomically(
        &dir.join(CA_KEY_FILE),
        key.serialize_pem().as_bytes(),
        0o600,
    )?;
    write_atomically(&cert_path, cert.pem().as_bytes(), 0o644)?;
    Ok(cert_path)
}

/// What one part's certificate is for.
#[derive(Debug, Clone)]
pub struct Leaf {
    /// What the part may do.
    pub role: PeerRole,
    /// Its name: in its identity, and a DNS or IP SAN.
    pub name: String,
    /// More DNS names or IP addresses it is reached at.
    pub sans: Vec<String>,
    /// How long it lasts.
    pub days: u32,
}

/// The files `issue` writes for `leaf` in `dir`: (certificate, key).
pub fn leaf_files(dir: &Path, role: PeerRole, name: &str) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("{role}-{name}.pem")),
        dir.join(format!("{role}-{name}-key.pem")),
    )
}

/// Issues `leaf`'s certificate with the CA in `dir`; writes it beside the CA (or
/// replaces the one there: a renewal). Returns (certificate, key) paths.
pub fn issue(dir: &Path, leaf: &Leaf) -> anyhow::Result<(PathBuf, PathBuf)> {
    let id = PeerId {
        role: leaf.role,
        name: leaf.name.clone(),
    };
    if PeerId::from_uri(&id.uri()).as_ref() != Some(&id) {
        bail!(
            "--name {:?}: 1-253 characters of A-Z a-z 0-9 - . _",
            leaf.name
        );
    }
    let ca_pem = read(&dir.join(CA_FILE))?;
    let ca_key_pem = read(&dir.join(CA_KEY_FILE))?;
    let ca_key = KeyPair::from_pem(&ca_key_pem)
        .with_context(|| format!("{}: not a key", dir.join(CA_KEY_FILE).display()))?;
    let ca = CertificateParams::from_ca_cert_pem(&ca_pem)
        .with_context(|| format!("{}: not a CA certificate", dir.join(CA_FILE).display()))?
        .self_signed(&ca_key)
        .context("the CA's key does not sign")?;

    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, format!("termgate {id}"));
    params.subject_alt_names = vec![SanType::URI(
        id.uri().try_into().context("the identity URI")?,
    )];
    for san in std::iter::once(&leaf.name).chain(&leaf.sans) {
        params.subject_alt_names.push(match san.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(
                san.as_str()
                    .try_into()
                    .with_context(|| format!("--san {san:?}: not a DNS name"))?,
            ),
        });
    }
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    validity(&mut params, leaf.days)?;
    let key = KeyPair::generate().context("cannot make the key")?;
    let cert = params
        .signed_by(&key, &ca, &ca_key)
        .context("cannot sign the certificate")?;
    let (cert_path, key_path) = leaf_files(dir, leaf.role, &leaf.name);
    write_atomically(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
    write_atomically(&cert_path, cert.pem().as_bytes(), 0o644)?;
    Ok((cert_path, key_path))
}

fn validity(params: &mut CertificateParams, days: u32) -> anyhow::Result<()> {
    if days == 0 {
        bail!("--days: at least 1");
    }
    let now = time::OffsetDateTime::now_utc();
    // An hour back: a peer whose clock is a little behind still accepts it.
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(i64::from(days));
    Ok(())
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

/// Writes `bytes` to a new file beside `path` with `mode`, then renames it over `path`.
fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .context("a file name")?;
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .with_context(|| format!("cannot create {}", tmp.display()))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn issued_certificates_carry_their_role_and_verify_against_the_ca() {
        let dir = tempfile::tempdir().unwrap();
        init(dir.path(), 30).unwrap();
        assert!(
            init(dir.path(), 30).is_err(),
            "a second init must not replace the CA"
        );
        let leaf = Leaf {
            role: PeerRole::Gateway,
            name: "gw-1".into(),
            sans: vec!["10.0.0.7".into(), "gw.internal".into()],
            days: 1,
        };
        let (cert, key) = issue(dir.path(), &leaf).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&key), 0o600);
        assert_eq!(mode(&dir.path().join(CA_KEY_FILE)), 0o600);
        let loaded = config::pki::Certificate::load(&cert, &key, "cert", "key").unwrap();
        let der = loaded.current().cert[0].clone();
        assert_eq!(
            PeerId::of_certificate(&der),
            Some(PeerId {
                role: PeerRole::Gateway,
                name: "gw-1".into()
            })
        );
        // The chain verifies against the CA, for the names asked.
        let roots = config::pki::load_roots(&dir.path().join(CA_FILE), "ca").unwrap();
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            roots,
            std::sync::Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        let now = rustls::pki_types::UnixTime::now();
        verifier.verify_client_cert(&der, &[], now).unwrap();
        // Another CA's certificate does not.
        let other = tempfile::tempdir().unwrap();
        init(other.path(), 30).unwrap();
        let (c2, k2) = issue(other.path(), &leaf).unwrap();
        let foreign = config::pki::Certificate::load(&c2, &k2, "c", "k")
            .unwrap()
            .current()
            .cert[0]
            .clone();
        assert!(verifier.verify_client_cert(&foreign, &[], now).is_err());
    }

    #[test]
    fn names_that_are_not_plain_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        init(dir.path(), 30).unwrap();
        for bad in ["", "a/b", "a b", "ünï"] {
            let leaf = Leaf {
                role: PeerRole::Pool,
                name: bad.into(),
                sans: vec![],
                days: 1,
            };
            assert!(issue(dir.path(), &leaf).is_err(), "{bad:?}");
        }
    }
}
