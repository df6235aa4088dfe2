//! `sitenet cert ca DIR` and `sitenet cert site --ca DIR DIR2`: a
//! deployment's CA and its sites' certificates, so that trying TLS takes
//! two commands (the TLS level).

use std::path::PathBuf;
use std::process::ExitCode;

use sitenet_transport::tls::{certs, TlsError};

#[derive(clap::Subcommand)]
pub(crate) enum CertCmd {
    /// Make a CA: writes DIR/ca.pem (the certificate every member trusts,
    /// --ca) and DIR/ca.key (its key, mode 0600: keep it off the nodes).
    /// Existing files are never overwritten.
    Ca {
        /// The directory (created if missing).
        dir: PathBuf,
    },
    /// Make a certificate for a fresh site id, signed by the CA in --ca:
    /// writes DIR/site.pem and DIR/site.key (mode 0600). A node started
    /// with `--cert DIR/site.pem --key DIR/site.key --ca CA/ca.pem` is that
    /// site. Existing files are never overwritten.
    Site {
        /// The CA's directory (as `sitenet cert ca` wrote it).
        #[arg(long, value_name = "DIR")]
        ca: PathBuf,
        /// The directory (created if missing).
        dir: PathBuf,
    },
}

fn json_path(p: &std::path::Path) -> String {
    serde_json::to_string(&p.display().to_string()).expect("a string")
}

/// An existing file is the user's to resolve (exit 2); anything else
/// failed (exit 1).
fn refused(e: TlsError) -> ExitCode {
    match e {
        TlsError::Exists(_) | TlsError::KeyPermissions { .. } | TlsError::Read { .. } => {
            crate::usage(e)
        }
        e => crate::failure(e),
    }
}

pub(crate) fn run(c: CertCmd) -> ExitCode {
    match c {
        CertCmd::Ca { dir } => match certs::write_ca(&dir) {
            Ok((cert, key)) => {
                println!(
                    "{{\"ca_cert\": {}, \"ca_key\": {}}}",
                    json_path(&cert),
                    json_path(&key)
                );
                ExitCode::SUCCESS
            }
            Err(e) => refused(e),
        },
        CertCmd::Site { ca, dir } => match certs::write_site(&ca, &dir) {
            Ok((site, cert, key)) => {
                println!(
                    "{{\"site_id\": \"{site}\", \"cert\": {}, \"key\": {}}}",
                    json_path(&cert),
                    json_path(&key)
                );
                ExitCode::SUCCESS
            }
            Err(e) => refused(e),
        },
    }
}
