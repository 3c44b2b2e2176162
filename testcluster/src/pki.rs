//! The control plane's certificates and kubeconfigs: one CA, the API
//! server's serving certificate for loopback, a client certificate per
//! component, and the key that signs ServiceAccount tokens.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// Where the files of the PKI are, once written.
#[derive(Debug, Clone)]
pub struct Pki {
    pub dir: PathBuf,
}

/// A client identity of the control plane: its kubeconfig file name, user
/// name and groups.
pub struct Identity {
    pub file: &'static str,
    pub user: &'static str,
    pub groups: &'static [&'static str],
}

/// Every client of the API server that uses a certificate. They are all
/// in `system:masters`: this is a test control plane, and the components'
/// own RBAC roles are not what is under test.
pub const IDENTITIES: [Identity; 4] = [
    Identity {
        file: "kubeconfig",
        user: "admin",
        groups: &["system:masters"],
    },
    Identity {
        file: "controller-manager.kubeconfig",
        user: "system:kube-controller-manager",
        groups: &["system:masters"],
    },
    Identity {
        file: "scheduler.kubeconfig",
        user: "system:kube-scheduler",
        groups: &["system:masters"],
    },
    Identity {
        file: "kwok.kubeconfig",
        user: "kwok",
        groups: &["system:masters"],
    },
];

impl Pki {
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }
    pub fn ca_key(&self) -> PathBuf {
        self.dir.join("ca.key")
    }
    pub fn serving_cert(&self) -> PathBuf {
        self.dir.join("apiserver.crt")
    }
    pub fn serving_key(&self) -> PathBuf {
        self.dir.join("apiserver.key")
    }
    /// The key that signs ServiceAccount tokens.
    pub fn service_account_key(&self) -> PathBuf {
        self.dir.join("sa.key")
    }
    /// The key that verifies them.
    pub fn service_account_public_key(&self) -> PathBuf {
        self.dir.join("sa.pub")
    }

    /// Write a CA, the serving certificate, the ServiceAccount key and a
    /// client certificate with a kubeconfig (in `kubeconfigs`) for every
    /// identity, for an API server at `server`.
    pub fn create(dir: &Path, kubeconfigs: &Path, server: &str) -> Result<Pki> {
        std::fs::create_dir_all(dir)?;
        let pki = Pki {
            dir: dir.to_path_buf(),
        };
        let ca_key = KeyPair::generate()?;
        let ca = ca_params()?;
        let ca_cert = ca.self_signed(&ca_key)?;
        write(&pki.ca(), &ca_cert.pem())?;
        write(&pki.ca_key(), &ca_key.serialize_pem())?;
        let issuer = Issuer::new(ca, ca_key);

        let serving_key = KeyPair::generate()?;
        let mut serving = CertificateParams::new(vec![
            "localhost".to_string(),
            "kubernetes".to_string(),
            "kubernetes.default".to_string(),
            "kubernetes.default.svc".to_string(),
            "kubernetes.default.svc.cluster.local".to_string(),
        ])?;
        serving
            .subject_alt_names
            .push(SanType::IpAddress([127, 0, 0, 1].into()));
        serving
            .subject_alt_names
            .push(SanType::IpAddress([10, 96, 0, 1].into()));
        serving.distinguished_name = name("kube-apiserver", &[]);
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving_cert = serving.signed_by(&serving_key, &issuer)?;
        write(&pki.serving_cert(), &serving_cert.pem())?;
        write(&pki.serving_key(), &serving_key.serialize_pem())?;

        let service_accounts = KeyPair::generate()?;
        write(
            &pki.service_account_key(),
            &service_accounts.serialize_pem(),
        )?;
        write(
            &pki.service_account_public_key(),
            &service_accounts.public_key_pem(),
        )?;

        std::fs::create_dir_all(kubeconfigs)?;
        for identity in &IDENTITIES {
            let key = KeyPair::generate()?;
            let mut client = CertificateParams::new(Vec::<String>::new())?;
            client.distinguished_name = name(identity.user, identity.groups);
            client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            let cert = client.signed_by(&key, &issuer)?;
            let kubeconfig = kubeconfig(
                server,
                &ca_cert.pem(),
                identity.user,
                Credentials::Certificate {
                    cert: &cert.pem(),
                    key: &key.serialize_pem(),
                },
            );
            write(&kubeconfigs.join(identity.file), &kubeconfig)?;
        }
        Ok(pki)
    }

    /// A certificate for a server on loopback (verdict's webhook), signed by
    /// this CA: the certificate's and the key's PEM.
    pub fn issue_serving(&self, name_: &str) -> Result<(String, String)> {
        // The same name and key make the same issuer: what it signs
        // chains to the CA written by `create`.
        let ca_key = KeyPair::from_pem(&read(&self.ca_key())?)?;
        let issuer = Issuer::new(ca_params()?, ca_key);
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec!["localhost".to_string(), name_.to_string()])?;
        params
            .subject_alt_names
            .push(SanType::IpAddress([127, 0, 0, 1].into()));
        params.distinguished_name = name(name_, &[]);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

/// How a kubeconfig's user proves who it is.
pub enum Credentials<'a> {
    Certificate { cert: &'a str, key: &'a str },
    Token(&'a str),
}

fn b64(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// A kubeconfig of one cluster, one user and one context, with the
/// certificates inline so that the file stands alone.
pub fn kubeconfig(server: &str, ca_pem: &str, user: &str, credentials: Credentials) -> String {
    let user_fields = match credentials {
        Credentials::Certificate { cert, key } => format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(cert),
            b64(key)
        ),
        Credentials::Token(token) => format!("    token: {token}\n"),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: verdict-test\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\ncontexts:\n- name: verdict-test\n  context:\n    cluster: verdict-test\n    user: {user}\ncurrent-context: verdict-test\nusers:\n- name: {user}\n  user:\n{user_fields}",
        b64(ca_pem),
    )
}

fn ca_params() -> Result<CertificateParams> {
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name = name("verdict-test-ca", &[]);
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(ca)
}

fn name(common: &str, organisations: &[&str]) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common);
    for organisation in organisations {
        name.push(DnType::OrganizationName, *organisation);
    }
    name
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}
