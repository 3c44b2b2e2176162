//! Registries that misbehave, served by the test on 127.0.0.1: one that
//! sends its manifest a byte a second, one whose manifest is too large, one
//! that sends more of a component than its manifest declares, one that
//! serves an image index, one that serves bytes that are not a component.
//! Every pull ends within its deadline, bounded in memory, with an error
//! that says what was wrong, and writes nothing; a stalled pull holds up no
//! other Policy, and a deleted Policy's pull is cancelled.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::Digest as _;

use crate::delivery::verdict;
use crate::support::wait_until;

/// How the fake registry misbehaves.
#[derive(Clone, Copy, PartialEq)]
enum Fault {
    /// The manifest a byte a second.
    Stall,
    /// A 5 MiB manifest.
    HugeManifest,
    /// A component of more bytes than the manifest declares.
    LongerThanDeclared,
    /// A manifest declaring a component of 2 GiB.
    HugeComponent,
    /// An image index where a manifest should be.
    Index,
    /// A component that is 16 bytes of text.
    NotWasm,
}

/// A registry on a free port of 127.0.0.1 with one fault; it counts the
/// connections that were closed on it while it was still sending.
struct FakeRegistry {
    address: String,
    abandoned: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<String>>>,
}

fn sha(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

impl FakeRegistry {
    fn start(fault: Fault) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let abandoned = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (gone, asked) = (Arc::clone(&abandoned), Arc::clone(&requests));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (gone, asked) = (Arc::clone(&gone), Arc::clone(&asked));
                std::thread::spawn(move || serve(stream, fault, &gone, &asked));
            }
        });
        Self {
            address,
            abandoned,
            requests,
        }
    }

    fn reference(&self) -> String {
        format!("{}/p/status:v1", self.address)
    }

    fn pull(&self, flags: &[&str], output: &Path) -> (bool, String) {
        let data = tempfile::tempdir().unwrap();
        let reference = self.reference();
        let mut args = vec![
            "policy",
            "pull",
            reference.as_str(),
            "-o",
            output.to_str().unwrap(),
            "--insecure-registry",
            self.address.as_str(),
        ];
        args.extend_from_slice(flags);
        let (ok, _, err) = verdict(&args, data.path());
        (ok, err)
    }
}

/// The component the registries serve, and its manifest.
fn artifact(fault: Fault) -> (Vec<u8>, Vec<u8>) {
    let component = if fault == Fault::NotWasm {
        b"sixteen bytes!!\n".to_vec()
    } else {
        // A component's preamble and then some: enough to be streamed.
        let mut bytes = vec![0, b'a', b's', b'm', 0x0d, 0, 1, 0];
        bytes.extend(std::iter::repeat_n(7u8, 64 * 1024));
        bytes
    };
    let config = b"{}".to_vec();
    let declared = match fault {
        Fault::LongerThanDeclared => component.len() - 1000,
        Fault::HugeComponent => 2 << 30,
        _ => component.len(),
    };
    let manifest = if fault == Fault::Index {
        serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": sha(b"x"), "size": 1}],
        })
    } else {
        serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.wasm.config.v0+json",
                "digest": sha(&config), "size": config.len()},
            "layers": [{"mediaType": "application/wasm",
                "digest": sha(&component), "size": declared}],
            "annotations": {"padding": if fault == Fault::HugeManifest { "x".repeat(5 << 20) } else { String::new() }},
        })
    };
    (component, serde_json::to_vec(&manifest).unwrap())
}

fn serve(mut stream: TcpStream, fault: Fault, gone: &AtomicUsize, asked: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_string();
        // The rest of the head.
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 || header.trim().is_empty() {
                break;
            }
        }
        asked.lock().unwrap().push(path.clone());
        let (component, manifest) = artifact(fault);
        let (media, body): (&str, Vec<u8>) = if path == "/v2/" {
            ("application/json", b"{}".to_vec())
        } else if path.contains("/manifests/") {
            let media = if fault == Fault::Index {
                "application/vnd.oci.image.index.v1+json"
            } else {
                "application/vnd.oci.image.manifest.v1+json"
            };
            (media, manifest)
        } else if path.contains("/blobs/") {
            ("application/octet-stream", component)
        } else {
            ("text/plain", Vec::new())
        };
        let status = if path.contains("/blobs/") || path.contains("/manifests/") || path == "/v2/" {
            "200 OK"
        } else {
            "404 Not Found"
        };
        let digest = if path.contains("/manifests/") {
            format!("docker-content-digest: {}\r\n", sha(&body))
        } else {
            String::new()
        };
        let head = format!(
            "HTTP/1.1 {status}\r\ncontent-type: {media}\r\ncontent-length: {}\r\n{digest}\r\n",
            body.len()
        );
        if stream.write_all(head.as_bytes()).is_err() {
            return;
        }
        if fault == Fault::Stall && path.contains("/manifests/") {
            for byte in &body {
                if stream.write_all(std::slice::from_ref(byte)).is_err() {
                    gone.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        } else if stream.write_all(&body).is_err() {
            return;
        }
    }
}

#[test]
fn a_stalling_registry_is_left_at_the_pull_deadline_and_nothing_is_written() {
    let registry = FakeRegistry::start(Fault::Stall);
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("status.wasm");
    let (ok, err) = registry.pull(&["--pull-timeout-s", "2"], &output);
    assert!(!ok, "a pull from a registry that never finishes succeeded");
    assert!(err.contains("pull deadline of 2 s"), "{err}");
    assert!(!output.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "a temporary file was left"
    );
}

#[test]
fn what_a_registry_sends_is_bounded_and_checked_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    for (fault, says) in [
        (Fault::HugeManifest, "the manifest is over 4194304 bytes"),
        (Fault::LongerThanDeclared, "than the"),
        (Fault::HugeComponent, "over the largest accepted (64 MiB"),
        (Fault::Index, "is an image index"),
        (Fault::NotWasm, "not a WebAssembly component"),
    ] {
        let registry = FakeRegistry::start(fault);
        let output = dir.path().join("status.wasm");
        let (ok, err) = registry.pull(&[], &output);
        assert!(!ok, "{says}: pulled");
        assert!(err.contains(says), "{says}: {err}");
        assert!(!output.exists(), "{says}: written");
        if fault == Fault::HugeComponent {
            // Refused on the manifest's word: the component was not asked for.
            let asked = registry.requests.lock().unwrap().clone();
            assert!(!asked.iter().any(|p| p.contains("/blobs/")), "{asked:?}");
        }
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_pull_writes_only_a_regular_file_or_a_new_path_and_names_it() {
    let Some(registry) = crate::delivery::Registry::start(
        "a_pull_writes_only_a_regular_file_or_a_new_path_and_names_it",
    ) else {
        return;
    };
    let data = tempfile::tempdir().unwrap();
    let pinned = crate::delivery::push(
        &registry,
        &crate::support::default_plugin("status"),
        &registry.reference("p/status:v1"),
        data.path(),
    );
    let dir = tempfile::tempdir().unwrap();
    let pull = |output: &Path| {
        registry.verdict(
            &[
                "policy",
                "pull",
                pinned.as_str(),
                "-o",
                output.to_str().unwrap(),
            ],
            data.path(),
        )
    };
    // A symlink is refused, and what it points at is left alone.
    let target = dir.path().join("target");
    std::fs::write(&target, b"kept").unwrap();
    let link = dir.path().join("link.wasm");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let (ok, _, err) = pull(&link);
    assert!(!ok);
    assert!(
        err.contains("link.wasm") && err.contains("symbolic link"),
        "{err}"
    );
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"kept");
    // So is a FIFO (as a device would be).
    let fifo = dir.path().join("fifo");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let (ok, _, err) = pull(&fifo);
    assert!(!ok);
    assert!(err.contains("not a regular file"), "{err}");
    assert!(
        !std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_file()
    );
    // A folder that does not exist is named, not called the policy cache.
    let (ok, _, err) = pull(&dir.path().join("missing/status.wasm"));
    assert!(!ok);
    assert!(
        err.contains("missing/status.wasm") && !err.contains("policy cache"),
        "{err}"
    );
    // A new path gets the usual mode; a file replaced keeps its own.
    use std::os::unix::fs::PermissionsExt as _;
    let new = dir.path().join("new.wasm");
    let (ok, _, err) = pull(&new);
    assert!(ok, "{err}");
    assert_eq!(
        std::fs::metadata(&new).unwrap().permissions().mode() & 0o777,
        0o644
    );
    std::fs::set_permissions(&new, std::fs::Permissions::from_mode(0o640)).unwrap();
    let (ok, _, err) = pull(&new);
    assert!(ok, "{err}");
    assert_eq!(
        std::fs::metadata(&new).unwrap().permissions().mode() & 0o777,
        0o640
    );
}

#[test]
fn a_stalled_policy_holds_up_no_other_and_its_pull_ends_when_it_is_deleted() {
    use crate::delivery::policy;
    let stalling = FakeRegistry::start(Fault::Stall);
    let component = std::fs::read(crate::support::example_plugin("restart-budget")).unwrap();
    let sha256 = hex::encode(sha2::Sha256::digest(&component));
    let url = crate::delivery::serve_bytes(component);
    let cluster = crate::live::Cluster::start();
    let group = crate::delivery::replicas(
        &cluster,
        None,
        1,
        &["--insecure-registry", stalling.address.as_str()],
    );
    let server = group.server(0);
    // The stalled one first: its pull takes the default deadline (120 s).
    cluster.apply(policy("stalled", &stalling.reference()));
    let started = wait_until(crate::live::PATIENCE, || {
        stalling
            .requests
            .lock()
            .unwrap()
            .iter()
            .any(|p| p.contains("/manifests/"))
    });
    assert!(started.is_some(), "the stalled Policy was never pulled");
    let mut good = policy("by-url", &url);
    good["spec"]["sha256"] = serde_json::json!(sha256);
    cluster.apply(good);
    let served = wait_until(crate::live::PATIENCE, || {
        crate::delivery::serving(server, "by-url").is_some()
    });
    assert!(
        served.is_some(),
        "a stalled registry held up another Policy"
    );
    // Deleted: its pull is cancelled, and the registry sees the connection go.
    let store = cluster.sim().store();
    let policies = store.find("verdict.dev", "v1alpha1", "policies").unwrap();
    store.delete(policies, "verdict-system", "stalled").unwrap();
    let left = wait_until(crate::live::PATIENCE, || {
        stalling.abandoned.load(Ordering::SeqCst) > 0
    });
    assert!(left.is_some(), "the deleted Policy's pull went on");
}
