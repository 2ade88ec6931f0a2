//! The hosts' TLS: one certificate for every public name, signed by a private CA made here
//! with openssl (the CA is `tls/ca.pem` in the hosts' directory; clients trust it).

use std::path::Path;
use std::process::{Command, Stdio};

use super::plan::DOMAIN;
use super::which;
use deploy::external::output_checked;

/// One certificate for every name up to three workers (like the contest's wildcard), signed
/// by a CA made here; kept while it is valid for another day.
pub(super) fn make_certificates(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let cert = dir.join("cert.pem");
    let names: Vec<String> = (1..=4)
        .map(|index| format!("DNS:isucondition-{index}.{DOMAIN}"))
        .collect();
    if cert.is_file() {
        let valid = Command::new("openssl")
            .args(["x509", "-noout", "-checkend", "86400", "-in"])
            .arg(&cert)
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        let names_all = Command::new("openssl")
            .args(["x509", "-noout", "-ext", "subjectAltName", "-in"])
            .arg(&cert)
            .output()
            .is_ok_and(|output| String::from_utf8_lossy(&output.stdout).contains(&format!("isucondition-4.{DOMAIN}")));
        if valid && names_all {
            return Ok(());
        }
    }
    which("openssl")?;
    let path = |name: &str| dir.join(name);
    output_checked(
        Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
            ])
            .args(["-nodes", "-days", "30", "-keyout"])
            .arg(path("ca-key.pem"))
            .arg("-out")
            .arg(path("ca.pem"))
            .args(["-subj", "/CN=isucondition hosts test CA"])
            .args(["-addext", "basicConstraints=critical,CA:TRUE"])
            .args(["-addext", "keyUsage=critical,keyCertSign"]),
    )?;
    output_checked(
        Command::new("openssl")
            .args([
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
            ])
            .arg(path("key.pem"))
            .arg("-out")
            .arg(path("cert.csr"))
            .args(["-subj", &format!("/CN=isucondition-1.{DOMAIN}")]),
    )?;
    std::fs::write(
        path("ext.cnf"),
        format!(
            "subjectAltName={}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
            names.join(",")
        ),
    )?;
    output_checked(
        Command::new("openssl")
            .args(["x509", "-req", "-in"])
            .arg(path("cert.csr"))
            .arg("-CA")
            .arg(path("ca.pem"))
            .arg("-CAkey")
            .arg(path("ca-key.pem"))
            .args(["-CAcreateserial", "-days", "30", "-out"])
            .arg(&cert)
            .arg("-extfile")
            .arg(path("ext.cnf")),
    )?;
    use std::os::unix::fs::PermissionsExt as _;
    for key in ["key.pem", "ca-key.pem"] {
        std::fs::set_permissions(path(key), std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(())
}
