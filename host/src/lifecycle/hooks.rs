//! Step hooks: how one task of an instance's list is carried out against the
//! outside world. A hook is named in the configuration (`[hooks.NAME]`) and
//! is an HTTP endpoint that verdict calls with the instance, the step and its
//! parameters, in the shape of Cluster API's Runtime SDK hooks:
//!
//! ```json
//! POST url
//! {"apiVersion": "verdict.dev/v1alpha1", "kind": "StepHookRequest",
//!  "key": "shop/web-0/5e1c…/3/1", "attempt": 1,
//!  "leader": {"holder": "verdict-7d9f-x2", "term": 4},
//!  "instance": {"namespace": "shop", "name": "web-0", "set": "web"},
//!  "stage": "initializing", "step": "install-environment",
//!  "params": {"packages": [{"name": "jdk", "version": "21"}]}}
//! ```
//!
//! — or a Kubernetes Job made from a template (`job = "install.yaml"`, see
//! [`super::jobs`]) —
//! and that answers `{"status": "done"}`, `{"status": "failed", "message":
//! "why"}` or `{"status": "running", "message": "…", "progress": 40,
//! "retryAfterSeconds": 5}`. The same step is asked again with the same
//! `key` while it runs and after a restart or a leader handover: a hook does
//! its work once per key and answers how it goes. The key names the
//! instance's machine by its UID and the list by its number, so a new
//! machine under an old name never shares a key with the old one's work.
//! `leader` is the replica that asks and its term: a hook that records the
//! highest term it has seen per key can refuse a deposed leader's late
//! call. A hook that does not answer
//! within its timeout, answers something else or cannot be reached fails its
//! step — or, with `failure-policy = "ignore"`, lets it pass, saying so.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::jobs::JobTemplate;

/// The longest answer read from a hook.
const MAX_ANSWER_BYTES: usize = 64 << 10;

/// How long a running step waits before it is asked again when its hook
/// does not say.
const DEFAULT_RETRY: Duration = Duration::from_secs(5);

/// The most a hook may ask to be waited for before it is asked again.
const MAX_RETRY: Duration = Duration::from_secs(3600);

/// What a failed call of a hook does to its step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailurePolicy {
    /// The step fails.
    #[default]
    Fail,
    /// The step passes, and its message says the hook failed.
    Ignore,
}

/// The steps the default lifecycle policy's lists are made of: each needs
/// a hook (`[hooks.<step>]`) for an instance to go through the machine.
pub const DEFAULT_STEPS: [&str; 8] = [
    "install-environment",
    "deploy-code",
    "health-check",
    "bind-monitoring",
    "attach-load-balancer",
    "detach-load-balancer",
    "pause-monitoring",
    "delete-machine",
];

fn default_timeout() -> u64 {
    10
}

/// One hook of the configuration (`[hooks.NAME]`): an endpoint or a Job
/// template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct HookSpec {
    /// The endpoint called with each step (`http://` or `https://`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A `batch/v1` Job template (a YAML or JSON file; relative to the
    /// configuration file's folder): a Job made from it carries out each
    /// step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<std::path::PathBuf>,
    /// Seconds one call may take (1 to 300).
    #[serde(default = "default_timeout")]
    pub timeout_seconds: u64,
    #[serde(default)]
    pub failure_policy: FailurePolicy,
}

impl HookSpec {
    /// An endpoint's hook.
    pub fn at(url: impl Into<String>) -> Self {
        Self {
            url: Some(url.into()),
            job: None,
            timeout_seconds: default_timeout(),
            failure_policy: FailurePolicy::default(),
        }
    }

    /// What carries the hook out, for people: its URL or its template.
    pub fn target(&self) -> String {
        match (&self.url, &self.job) {
            (Some(url), _) => url.clone(),
            (None, Some(job)) => format!("Job template {}", job.display()),
            (None, None) => "nothing".into(),
        }
    }

    /// Whether the hook can be called; what is wrong when not.
    pub fn check(&self, name: &str) -> Result<(), String> {
        match (&self.url, &self.job) {
            (Some(url), None) => {
                let parsed = reqwest::Url::parse(url)
                    .map_err(|e| format!("hooks.{name}: url `{url}` does not read: {e}"))?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    return Err(format!("hooks.{name}: url `{url}` is not http or https"));
                }
            }
            (None, Some(job)) => {
                JobTemplate::load(job).map_err(|e| format!("hooks.{name}: {e}"))?;
            }
            (Some(_), Some(_)) => {
                return Err(format!("hooks.{name}: a url or a job, not both"));
            }
            (None, None) => return Err(format!("hooks.{name}: a url or a job is needed")),
        }
        if !(1..=300).contains(&self.timeout_seconds) {
            return Err(format!(
                "hooks.{name}: timeout-seconds is {}; from 1 to 300",
                self.timeout_seconds
            ));
        }
        Ok(())
    }
}

/// The instance a step is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceRef {
    pub namespace: String,
    pub name: String,
    pub set: String,
    /// Its Server's UID: what a Job made for its step is owned by.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

/// One call of a step's hook.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepCall<'a> {
    /// The same for every call of one step of one list: a hook does its
    /// work once per key.
    pub key: &'a str,
    /// How many times this step has been asked, this call included.
    pub attempt: u32,
    /// The leader that asks, and its term.
    pub leader: &'a crate::leader::Term,
    pub instance: &'a InstanceRef,
    pub stage: &'a str,
    pub step: &'a str,
    pub params: &'a Value,
}

/// How a step goes, as its hook answered (or failed to).
#[derive(Debug, Clone, PartialEq)]
pub enum StepOutcome {
    Done {
        message: String,
    },
    Failed {
        message: String,
    },
    Running {
        message: String,
        progress: Option<u8>,
        /// When to ask again.
        retry_after: Duration,
    },
}

/// A hook's answer as it reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Answer {
    status: String,
    #[serde(default)]
    message: String,
    #[serde(default)]
    progress: Option<u8>,
    #[serde(default)]
    retry_after_seconds: Option<u64>,
}

/// The hooks of the configuration, by name, and the client that calls them.
#[derive(Debug, Clone)]
pub struct Hooks {
    specs: BTreeMap<String, HookSpec>,
    /// The Job templates of the hooks that make Jobs, read once.
    templates: BTreeMap<String, JobTemplate>,
    client: reqwest::Client,
}

impl Hooks {
    /// The hooks, each checked; the first that cannot be called is the
    /// error.
    pub fn new(specs: BTreeMap<String, HookSpec>) -> Result<Self, String> {
        let mut templates = BTreeMap::new();
        for (name, spec) in &specs {
            spec.check(name)?;
            if let Some(path) = &spec.job {
                let template = JobTemplate::load(path).map_err(|e| format!("hooks.{name}: {e}"))?;
                templates.insert(name.clone(), template);
            }
        }
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("the hooks' HTTP client: {e}"))?;
        Ok(Self {
            specs,
            templates,
            client,
        })
    }

    /// The names of the hooks.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.specs.keys().map(String::as_str)
    }

    /// Whether a step of this name has a hook.
    pub fn has(&self, step: &str) -> bool {
        self.specs.contains_key(step)
    }

    /// Call the hook of `call.step` once (a Job hook through `kube`); a
    /// step no hook is named for fails, saying which hooks there are.
    pub async fn call(&self, call: &StepCall<'_>, kube: &kube::Client) -> StepOutcome {
        let Some(spec) = self.specs.get(call.step) else {
            let known: Vec<&str> = self.names().collect();
            return StepOutcome::Failed {
                message: format!(
                    "no step hook is named {} (the configuration names: {})",
                    call.step,
                    match known.is_empty() {
                        true => "none".to_string(),
                        false => known.join(", "),
                    }
                ),
            };
        };
        let asked = match self.templates.get(call.step) {
            Some(template) => {
                let timeout = Duration::from_secs(spec.timeout_seconds);
                tokio::time::timeout(timeout, super::jobs::ask(kube, template, call))
                    .await
                    .unwrap_or_else(|_| {
                        Err(format!(
                            "no answer within its timeout of {}s",
                            spec.timeout_seconds
                        ))
                    })
            }
            None => self.ask(spec, call).await,
        };
        match asked {
            Ok(outcome) => outcome,
            Err(error) => {
                let message = format!("hook {} at {}: {error}", call.step, spec.target());
                match spec.failure_policy {
                    FailurePolicy::Fail => StepOutcome::Failed { message },
                    FailurePolicy::Ignore => StepOutcome::Done {
                        message: format!("{message}; passed by its failure policy (ignore)"),
                    },
                }
            }
        }
    }

    async fn ask(&self, spec: &HookSpec, call: &StepCall<'_>) -> Result<StepOutcome, String> {
        let url = spec.url.as_deref().unwrap_or_default();
        let mut body = serde_json::to_value(call).map_err(|e| e.to_string())?;
        body["apiVersion"] = "verdict.dev/v1alpha1".into();
        body["kind"] = "StepHookRequest".into();
        let timeout = Duration::from_secs(spec.timeout_seconds);
        let answer = async {
            let response = self
                .client
                .post(url)
                .json(&body)
                .send()
                .await
                .map_err(|e| describe(&e))?;
            let status = response.status();
            let bytes = read_bounded(response).await?;
            if !status.is_success() {
                let text = String::from_utf8_lossy(&bytes);
                return Err(format!(
                    "answered HTTP {status}: {}",
                    text.chars().take(200).collect::<String>()
                ));
            }
            Ok(bytes)
        };
        let bytes = tokio::time::timeout(timeout, answer)
            .await
            .map_err(|_| format!("no answer within its timeout of {}s", spec.timeout_seconds))??;
        let answer: Answer = serde_json::from_slice(&bytes)
            .map_err(|e| format!("the answer is not a step hook answer: {e}"))?;
        match answer.status.as_str() {
            "done" => Ok(StepOutcome::Done {
                message: answer.message,
            }),
            "failed" => Ok(StepOutcome::Failed {
                message: match answer.message.is_empty() {
                    true => "the hook says it failed".into(),
                    false => answer.message,
                },
            }),
            "running" => Ok(StepOutcome::Running {
                message: answer.message,
                progress: answer.progress.map(|p| p.min(100)),
                retry_after: answer
                    .retry_after_seconds
                    .map_or(DEFAULT_RETRY, |s| Duration::from_secs(s.max(1)))
                    .min(MAX_RETRY),
            }),
            other => Err(format!(
                "the answer's status is `{other}`, not done, failed or running"
            )),
        }
    }
}

/// An HTTP client error in a few words: the cause, not the chain.
fn describe(error: &reqwest::Error) -> String {
    let mut cause: &dyn std::error::Error = error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    match error.is_connect() {
        true => format!("cannot be reached: {cause}"),
        false => cause.to_string(),
    }
}

/// The body of a response, refused past [`MAX_ANSWER_BYTES`].
async fn read_bounded(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| describe(&e))? {
        if bytes.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(format!("the answer is over {} KiB", MAX_ANSWER_BYTES >> 10));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// One step's call, owned, for a task of its own.
#[derive(Debug, Clone)]
pub struct OwnedCall {
    pub key: String,
    pub attempt: u32,
    pub leader: crate::leader::Term,
    pub instance: InstanceRef,
    pub stage: String,
    pub step: String,
    pub params: Value,
}

impl OwnedCall {
    fn borrowed(&self) -> StepCall<'_> {
        StepCall {
            key: &self.key,
            attempt: self.attempt,
            leader: &self.leader,
            instance: &self.instance,
            stage: &self.stage,
            step: &self.step,
            params: &self.params,
        }
    }
}

/// How many step hook calls are under way at most, across every set.
pub const CALLS_AT_ONCE: usize = 64;

/// How long an answer no reconcile took is kept (its instance was deleted
/// or a person moved it on meanwhile).
const UNCLAIMED: Duration = Duration::from_secs(600);

/// Step hook calls under way, each a task of its own, by the step's key:
/// a reconcile starts a call and takes its answer on a later reconcile,
/// so that a hook that takes its whole timeout holds only its own step,
/// never another instance's or another set's.
#[derive(Debug)]
pub struct Calls {
    hooks: Hooks,
    under_way: std::sync::Mutex<BTreeMap<String, UnderWay>>,
    room: std::sync::Arc<tokio::sync::Semaphore>,
    /// Told of each instance whose hook answered, so that its answer is
    /// taken at once.
    answered: tokio::sync::broadcast::Sender<InstanceRef>,
}

#[derive(Debug)]
struct UnderWay {
    /// The attempt asked: a reconcile takes the answer of its own attempt.
    attempt: u32,
    task: tokio::task::JoinHandle<StepOutcome>,
    /// The answer, once the task ended: kept until the instance records it
    /// ([`Calls::taken`]), so that a record the API server did not take
    /// takes the same answer again instead of asking again.
    answer: Option<StepOutcome>,
    started: std::time::Instant,
}

/// Where a step's call stands.
#[derive(Debug, Clone, PartialEq)]
pub enum Asked {
    /// Its hook answered.
    Answered(StepOutcome),
    /// Asked; the answer is awaited elsewhere.
    UnderWay,
    /// As many calls as may be are under way: asked on a later reconcile.
    Full,
}

impl Calls {
    pub fn new(hooks: Hooks) -> Self {
        Self {
            hooks,
            under_way: std::sync::Mutex::default(),
            room: std::sync::Arc::new(tokio::sync::Semaphore::new(CALLS_AT_ONCE)),
            answered: tokio::sync::broadcast::Sender::new(1024),
        }
    }

    pub fn hooks(&self) -> &Hooks {
        &self.hooks
    }

    /// Whether a call of the step with `key` is under way (or answered and
    /// not taken yet).
    pub fn under_way(&self, key: &str) -> bool {
        self.under_way
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains_key(key)
    }

    /// The instances whose hooks answer, from now on (a receiver that
    /// falls behind is told it lagged).
    pub fn answered(&self) -> tokio::sync::broadcast::Receiver<InstanceRef> {
        self.answered.subscribe()
    }

    /// The answer of the step with `key` is recorded: it goes.
    pub fn taken(&self, key: &str) {
        self.under_way
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
    }

    /// Ask `call`'s hook (a Job hook through `kube`), or its answer when
    /// the call of this key and attempt has ended (kept until
    /// [`Calls::taken`]).
    pub fn ask(&self, call: OwnedCall, kube: &kube::Client) -> Asked {
        let mut under_way = self
            .under_way
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        under_way.retain(|_, u| !(u.task.is_finished() && u.started.elapsed() > UNCLAIMED));
        if let Some(asked) = under_way
            .get_mut(&call.key)
            .filter(|u| u.attempt == call.attempt)
        {
            if let Some(answer) = &asked.answer {
                return Asked::Answered(answer.clone());
            }
            if !asked.task.is_finished() {
                return Asked::UnderWay;
            }
            let answer = match futures_util::FutureExt::now_or_never(&mut asked.task) {
                Some(Ok(outcome)) => outcome,
                Some(Err(error)) => StepOutcome::Failed {
                    message: format!(
                        "the call of the step's hook ended without an answer: {error}"
                    ),
                },
                None => return Asked::UnderWay,
            };
            asked.answer = Some(answer.clone());
            return Asked::Answered(answer);
        }
        let Ok(permit) = std::sync::Arc::clone(&self.room).try_acquire_owned() else {
            return Asked::Full;
        };
        let (hooks, kube, answered) = (self.hooks.clone(), kube.clone(), self.answered.clone());
        let key = call.key.clone();
        let attempt = call.attempt;
        let task = tokio::spawn(async move {
            let outcome = hooks.call(&call.borrowed(), &kube).await;
            drop(permit);
            // None listening: the answer is taken on the next reconcile.
            let _ = answered.send(call.instance.clone());
            outcome
        });
        under_way.insert(
            key,
            UnderWay {
                attempt,
                task,
                answer: None,
                started: std::time::Instant::now(),
            },
        );
        Asked::UnderWay
    }
}

#[cfg(test)]
mod tests;
