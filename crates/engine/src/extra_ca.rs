//! The extra roots the user trusts: `NEVERMISS_EXTRA_CA=/path/ca.pem`, one or more root
//! certificates (PEM) trusted besides the public (Mozilla) roots by every TLS connection this
//! app makes out: to the hub, to HTTP channels (ntfy, webhooks) and to SMTP servers. For a
//! self-hosted server whose certificate comes from the user's own CA.
//!
//! The engine reads the file once, when it starts, and hands the roots to each client; a file
//! that cannot be read or holds no valid certificate is a warning, and only the public roots are
//! trusted.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

/// The variable naming the PEM file.
pub const EXTRA_CA_VAR: &str = "NEVERMISS_EXTRA_CA";

/// Why the extra roots' file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BadCaFile {
    /// Not readable, or not PEM.
    #[error("{0}")]
    Unreadable(#[from] rustls::pki_types::pem::Error),
    #[error("no certificate in the file")]
    NoCertificate,
    #[error("not a root certificate: {0}")]
    NotARoot(rustls::Error),
}

/// Root certificates trusted besides the public ones (none by default).
#[derive(Debug, Clone, Default)]
pub struct ExtraRoots {
    certificates: Arc<[CertificateDer<'static>]>,
}

impl ExtraRoots {
    /// No extra roots: only the public ones are trusted.
    pub fn none() -> ExtraRoots {
        ExtraRoots::default()
    }

    /// The roots in `NEVERMISS_EXTRA_CA`'s file; none when it is unset, or (with a warning
    /// naming the variable and the file) when the file cannot be read or is not valid.
    pub fn from_env() -> ExtraRoots {
        let Some(path) = std::env::var_os(EXTRA_CA_VAR).filter(|p| !p.is_empty()) else {
            return ExtraRoots::none();
        };
        let path = Path::new(&path);
        match ExtraRoots::from_pem_file(path) {
            Ok(roots) => {
                tracing::info!(path = %path.display(), count = roots.certificates.len(), "{EXTRA_CA_VAR}: trusting these roots besides the public ones");
                roots
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "{EXTRA_CA_VAR}: cannot read the CA; only public CAs are trusted");
                ExtraRoots::none()
            }
        }
    }

    /// The certificates of a PEM file: at least one, each one rustls takes as a root.
    pub fn from_pem_file(path: &Path) -> Result<ExtraRoots, BadCaFile> {
        let certificates = CertificateDer::pem_file_iter(path).and_then(|certs| certs.collect::<Result<Vec<_>, _>>())?;
        if certificates.is_empty() {
            return Err(BadCaFile::NoCertificate);
        }
        let mut check = rustls::RootCertStore::empty();
        for certificate in &certificates {
            check.add(certificate.clone()).map_err(BadCaFile::NotARoot)?;
        }
        Ok(ExtraRoots { certificates: certificates.into() })
    }

    /// Each certificate, DER-encoded.
    pub fn der(&self) -> impl Iterator<Item = &[u8]> {
        self.certificates.iter().map(|c| c.as_ref())
    }

    /// An HTTP client builder that trusts these roots too.
    pub fn trusted_by(&self, mut builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
        for der in self.der() {
            match reqwest::Certificate::from_der(der) {
                Ok(certificate) => builder = builder.add_root_certificate(certificate),
                Err(e) => tracing::warn!(error = %e, "{EXTRA_CA_VAR}: a certificate is left out"),
            }
        }
        builder
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_missing_or_holds_no_certificate_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(ExtraRoots::from_pem_file(&dir.path().join("missing.pem")).is_err());
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        assert_eq!(ExtraRoots::from_pem_file(&empty).unwrap_err().to_string(), "no certificate in the file");
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").unwrap();
        assert!(ExtraRoots::from_pem_file(&garbage).is_err());
    }
}
