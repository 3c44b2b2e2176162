//! Label selectors (`app=web,tier!=db,env in (a,b),!legacy,version`) and the
//! field selectors kubectl sends (`metadata.name=x`, `metadata.namespace=y`).

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    Absent(String),
}

/// A parsed label and field selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    labels: Vec<Requirement>,
    /// `(path, value, equal)` on `metadata.name` or `metadata.namespace`.
    fields: Vec<(String, String, bool)>,
}

/// Split on commas outside parentheses.
fn split(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

fn values(list: &str) -> Result<Vec<String>, String> {
    let inner = list
        .trim()
        .strip_prefix('(')
        .and_then(|l| l.strip_suffix(')'))
        .ok_or_else(|| format!("expected (values) in `{list}`"))?;
    Ok(inner.split(',').map(|v| v.trim().to_string()).collect())
}

fn requirement(text: &str) -> Result<Requirement, String> {
    if let Some(key) = text.strip_prefix('!') {
        return Ok(Requirement::Absent(key.trim().to_string()));
    }
    if let Some((key, value)) = text.split_once("!=") {
        return Ok(Requirement::NotEquals(
            key.trim().into(),
            value.trim().into(),
        ));
    }
    if let Some((key, value)) = text.split_once("==").or_else(|| text.split_once('=')) {
        return Ok(Requirement::Equals(key.trim().into(), value.trim().into()));
    }
    if let Some((key, list)) = text.split_once(" notin ") {
        return Ok(Requirement::NotIn(key.trim().into(), values(list)?));
    }
    if let Some((key, list)) = text.split_once(" in ") {
        return Ok(Requirement::In(key.trim().into(), values(list)?));
    }
    if text.contains(char::is_whitespace) {
        return Err(format!("cannot parse label selector requirement `{text}`"));
    }
    Ok(Requirement::Exists(text.to_string()))
}

impl Selector {
    pub fn parse(labels: Option<&str>, fields: Option<&str>) -> Result<Self, String> {
        let labels = split(labels.unwrap_or_default())
            .into_iter()
            .map(requirement)
            .collect::<Result<_, _>>()?;
        let mut parsed = Vec::new();
        for part in split(fields.unwrap_or_default()) {
            let (path, value, equal) = match part.split_once("!=") {
                Some((p, v)) => (p, v, false),
                None => match part.split_once("==").or_else(|| part.split_once('=')) {
                    Some((p, v)) => (p, v, true),
                    None => return Err(format!("cannot parse field selector `{part}`")),
                },
            };
            if !matches!(path.trim(), "metadata.name" | "metadata.namespace") {
                return Err(format!("field label not supported: {}", path.trim()));
            }
            parsed.push((path.trim().to_string(), value.trim().to_string(), equal));
        }
        Ok(Self {
            labels,
            fields: parsed,
        })
    }

    pub fn matches(&self, object: &Value) -> bool {
        let label = |key: &str| {
            object
                .pointer("/metadata/labels")
                .and_then(|l| l.get(key))
                .and_then(Value::as_str)
        };
        let labels_match = self.labels.iter().all(|r| match r {
            Requirement::Equals(k, v) => label(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => label(k) != Some(v.as_str()),
            Requirement::In(k, vs) => label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Requirement::NotIn(k, vs) => label(k).is_none_or(|l| vs.iter().all(|v| v != l)),
            Requirement::Exists(k) => label(k).is_some(),
            Requirement::Absent(k) => label(k).is_none(),
        });
        labels_match
            && self.fields.iter().all(|(path, value, equal)| {
                let pointer = format!("/{}", path.replace('.', "/"));
                let actual = object
                    .pointer(&pointer)
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                (actual == value) == *equal
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_and_field_selectors_match_as_kubernetes_does() {
        let pod = json!({"metadata": {"name": "web-1", "namespace": "shop", "labels": {"app": "web", "env": "prod"}}});
        let yes = [
            "app=web",
            "app==web,env!=dev",
            "env in (prod, staging)",
            "env notin (dev)",
            "app",
            "!legacy",
        ];
        for s in yes {
            assert!(Selector::parse(Some(s), None).unwrap().matches(&pod), "{s}");
        }
        for s in ["app=db", "env in (dev)", "legacy", "!app"] {
            assert!(
                !Selector::parse(Some(s), None).unwrap().matches(&pod),
                "{s}"
            );
        }
        assert!(
            Selector::parse(None, Some("metadata.name=web-1"))
                .unwrap()
                .matches(&pod)
        );
        assert!(
            !Selector::parse(None, Some("metadata.namespace!=shop"))
                .unwrap()
                .matches(&pod)
        );
        assert!(Selector::parse(None, Some("spec.nodeName=n1")).is_err());
        assert!(Selector::parse(Some("a b c"), None).is_err());
    }
}
