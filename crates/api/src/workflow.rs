//! The batch-workflow vocabulary a submission may carry, and its one parser each: job arrays
//! (`0-99%8`, Slurm's `--array`), dependencies (`ok:12,any:13`, Slurm's `--dependency=afterok:…`),
//! labels and label selectors (kubectl's `-l k=v`) and the work directory inside a job's
//! sandbox. The CLI and the server parse with the same functions, so a value the CLI accepts is
//! one the server accepts, and each error is a sentence naming the field.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::JobId;

/// Most members one array may have.
pub const MAX_ARRAY_MEMBERS: usize = 10_000;
/// Largest array index.
pub const MAX_ARRAY_INDEX: u32 = 1_000_000;
/// Most dependencies of one job.
pub const MAX_DEPENDENCIES: usize = 64;
/// Most labels on one job.
pub const MAX_LABELS: usize = 32;

/// A job array as asked for: the indices and how many members may run at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArraySpec {
    /// The indices, ascending, without repeats.
    pub indices: Vec<u32>,
    /// At most this many members running (or scheduled) at once; `None`: no limit.
    pub max_running: Option<u32>,
}

impl ArraySpec {
    /// Parses Slurm's syntax: `0-99`, `1,3,5`, `0-9,20-29`, `0-99:2` (a step), each optionally
    /// followed by `%N` (at most N at once). At most [`MAX_ARRAY_MEMBERS`] indices, an index named
    /// twice counting twice.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = |why: String| format!("array: {why} (e.g. `0-99`, `1,3,5` or `0-99%8`)");
        let (list, limit) = match text.split_once('%') {
            Some((list, limit)) => {
                let n: u32 = limit.trim().parse().map_err(|_| bad(format!("`%{limit}` is not a number")))?;
                if n == 0 {
                    return Err(bad("the limit after `%` must be at least 1".into()));
                }
                (list, Some(n))
            }
            None => (text, None),
        };
        let mut indices = std::collections::BTreeSet::new();
        // Every index a part names counts, repeats included, so the work done here is bounded
        // by the limit and not by the size of the text (`0-9999` repeated would be unbounded).
        let mut named = 0usize;
        for part in list.split(',') {
            let part = part.trim();
            let (range, step) = match part.split_once(':') {
                Some((r, s)) => (
                    r,
                    s.parse::<u32>()
                        .ok()
                        .filter(|s| *s > 0)
                        .ok_or_else(|| bad(format!("bad step in `{part}`")))?,
                ),
                None => (part, 1),
            };
            let number = |s: &str| -> Result<u32, String> {
                let n: u32 = s.trim().parse().map_err(|_| bad(format!("`{s}` is not an index")))?;
                if n > MAX_ARRAY_INDEX {
                    return Err(bad(format!("index {n} is above {MAX_ARRAY_INDEX}")));
                }
                Ok(n)
            };
            let (first, last) = match range.split_once('-') {
                Some((a, b)) => (number(a)?, number(b)?),
                None => (number(range)?, number(range)?),
            };
            if first > last {
                return Err(bad(format!("`{range}` counts down")));
            }
            for i in (first..=last).step_by(step as usize) {
                indices.insert(i);
                named += 1;
                if named > MAX_ARRAY_MEMBERS {
                    return Err(bad(format!("more than {MAX_ARRAY_MEMBERS} members")));
                }
            }
        }
        Ok(Self { indices: indices.into_iter().collect(), max_running: limit })
    }
}

/// Slurm's syntax again, runs of consecutive indices as ranges: what [`ArraySpec::parse`] reads
/// back as the same indices and limit.
impl std::fmt::Display for ArraySpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut rest = self.indices.iter().copied().peekable();
        let mut first_part = true;
        while let Some(start) = rest.next() {
            let mut end = start;
            while rest.peek() == Some(&(end + 1)) {
                end = rest.next().unwrap_or(end);
            }
            let sep = if first_part { "" } else { "," };
            first_part = false;
            match end - start {
                0 => write!(f, "{sep}{start}")?,
                _ => write!(f, "{sep}{start}-{end}")?,
            }
        }
        match self.max_running {
            Some(n) => write!(f, "%{n}"),
            None => Ok(()),
        }
    }
}

/// Where a job stands in its array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ArrayMember {
    /// The array's id: the id of its first member (`gantry cancel <id>` cancels them all).
    pub id: JobId,
    /// This member's index (`GANTRY_ARRAY_INDEX` in its environment).
    pub index: u32,
    /// At most this many members run at once (`None`: no limit).
    pub max_running: Option<u32>,
}

/// How a dependency must end for the job that waits on it to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum DependencyKind {
    /// It succeeded (Slurm's `afterok`).
    Ok,
    /// It ended in any other way: failed, cancelled, timed out (`afternotok`).
    NotOk,
    /// It ended, however (`afterany`).
    Any,
}

impl DependencyKind {
    /// The word used on the command line and in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::NotOk => "notok",
            Self::Any => "any",
        }
    }
}

/// A job another job waits for. On an array's id it means every member of the array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Dependency {
    /// How it must end.
    pub kind: DependencyKind,
    /// The job (or array) waited for.
    pub job: JobId,
}

impl std::fmt::Display for Dependency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.kind.as_str(), self.job)
    }
}

/// Parses `ok:12,any:13,notok:14` (Slurm's `afterok:12` spellings and `12` alone, meaning
/// `any`, are accepted too).
pub fn parse_dependencies(text: &str) -> Result<Vec<Dependency>, String> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (kind, ids) = match part.split_once(':') {
            Some((kind, ids)) => (kind.trim().trim_start_matches("after"), ids),
            None => ("any", part),
        };
        let kind = match kind {
            "ok" => DependencyKind::Ok,
            "notok" => DependencyKind::NotOk,
            "any" => DependencyKind::Any,
            other => {
                return Err(format!(
                    "after: unknown condition `{other}` (known: ok, notok, any; e.g. `ok:12,any:13`)"
                ));
            }
        };
        // Slurm allows `afterok:12:13`.
        for id in ids.split(':') {
            let job: JobId = id
                .trim()
                .parse()
                .ok()
                .filter(|j| *j > 0)
                .ok_or_else(|| format!("after: `{id}` is not a job id (e.g. `ok:12,any:13`)"))?;
            out.push(Dependency { kind, job });
        }
    }
    if out.is_empty() {
        return Err("after: name at least one job (e.g. `ok:12`)".into());
    }
    if out.len() > MAX_DEPENDENCIES {
        return Err(format!("after: at most {MAX_DEPENDENCIES} dependencies"));
    }
    Ok(out)
}

/// Checks one label: keys are 1 to 63 characters of letters, digits, `-`, `_`, `.` and `/`,
/// starting with a letter or digit; values are 0 to 63 of letters, digits, `-`, `_`, `.`
/// (Kubernetes' rules, simplified), so a selector on the command line needs no quoting.
pub fn check_label(key: &str, value: &str) -> Result<(), String> {
    let key_ok = key.len() <= 63
        && key.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && key.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
    if !key_ok {
        return Err(format!(
            "label: `{key}` is not a label key (1 to 63 letters, digits, '-', '_', '.', '/', starting with a letter or digit)"
        ));
    }
    let value_ok = value.len() <= 63 && value.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if !value_ok {
        return Err(format!(
            "label: the value of `{key}` must be at most 63 letters, digits, '-', '_' or '.'"
        ));
    }
    Ok(())
}

/// Checks a job's labels.
pub fn check_labels(labels: &BTreeMap<String, String>) -> Result<(), String> {
    if labels.len() > MAX_LABELS {
        return Err(format!("labels: at most {MAX_LABELS}"));
    }
    labels.iter().try_for_each(|(k, v)| check_label(k, v))
}

/// Parses one `key=value`.
pub fn parse_label(text: &str) -> Result<(String, String), String> {
    let (k, v) = text
        .split_once('=')
        .ok_or_else(|| format!("label: `{text}` is not KEY=VALUE (e.g. `exp=lr-sweep`)"))?;
    check_label(k, v)?;
    Ok((k.to_owned(), v.to_owned()))
}

/// Parses a selector: `k=v` or `k=v,k2=v2` (every pair must match).
pub fn parse_selector(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = parse_label(pair)?;
        out.insert(k, v);
    }
    if out.is_empty() {
        return Err("label: an empty selector (e.g. `-l exp=lr-sweep`)".into());
    }
    Ok(out)
}

/// Checks a work directory: a relative path inside the job's private directory, made of plain
/// names (no `..`, no `.`, no empty parts, not absolute), at most 255 bytes. The agent creates
/// it fresh inside the attempt's new directory, so it cannot lead out of the sandbox: there is
/// nothing there yet for it to follow.
pub fn check_workdir(dir: &str) -> Result<(), String> {
    let bad = |why: &str| {
        Err(format!(
            "workdir: {why}; it must be a relative path inside the job's own directory (e.g. `run/out`)"
        ))
    };
    if dir.is_empty() || dir.len() > 255 {
        return bad("must be 1 to 255 bytes");
    }
    if dir.starts_with('/') {
        return bad(&format!("`{dir}` is absolute"));
    }
    for part in dir.split('/') {
        match part {
            "" | "." => return bad(&format!("`{dir}` has an empty or `.` part")),
            ".." => return bad(&format!("`{dir}` climbs out with `..`")),
            p if p.chars().any(|c| c.is_control()) => return bad("contains a control character"),
            _ => {}
        }
    }
    Ok(())
}

/// Checks a `--chdir` path: absolute, with no empty, `.` or `..` part (`/` itself is refused
/// too), at most 4096 bytes, no control character. Whether the node has it is the agent's check.
pub fn check_chdir(dir: &str) -> Result<(), String> {
    let bad = |why: &str| {
        Err(format!("chdir: {why}; it must be an absolute path on the node (e.g. `/shared/project`)"))
    };
    if dir.len() > 4096 || !dir.starts_with('/') || dir == "/" {
        return bad(&format!("`{dir}` is not an absolute path below `/`"));
    }
    for part in dir[1..].split('/') {
        match part {
            "" | "." | ".." => return bad(&format!("`{dir}` has an empty, `.` or `..` part")),
            p if p.chars().any(|c| c.is_control()) => return bad("contains a control character"),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_ranges_lists_steps_and_limits_parse() {
        let a = ArraySpec::parse("0-99%8").expect("valid");
        assert_eq!((a.indices.len(), a.indices[0], a.indices[99], a.max_running), (100, 0, 99, Some(8)));
        assert_eq!(ArraySpec::parse("1,3,5").expect("valid").indices, vec![1, 3, 5]);
        assert_eq!(ArraySpec::parse("0-9:3").expect("valid").indices, vec![0, 3, 6, 9]);
        assert_eq!(ArraySpec::parse("5,1-2").expect("valid").indices, vec![1, 2, 5]);
    }

    #[test]
    fn an_array_prints_as_text_that_parses_back_to_it() {
        for text in ["0-99%8", "1,3,5", "0-9:3", "5,1-2", "7", "0-2,4-6%1"] {
            let a = ArraySpec::parse(text).expect("valid");
            assert_eq!(ArraySpec::parse(&a.to_string()), Ok(a.clone()), "{text} printed as {a}");
        }
        assert_eq!(ArraySpec::parse("5,1-2,3%4").expect("valid").to_string(), "1-3,5%4");
    }

    #[test]
    fn bad_arrays_are_refused_with_an_example() {
        for bad in ["", "a", "9-0", "0-9%0", "0-9%x", "0-2000000", "0-20000"] {
            let err = ArraySpec::parse(bad).expect_err(bad);
            assert!(err.starts_with("array: "), "{err}");
        }
    }

    #[test]
    fn overlapping_parts_count_toward_the_member_limit() {
        // Each part's indices count, repeats included: the work of parsing is bounded by the limit.
        assert!(
            ArraySpec::parse(&["0-9999"; 2].join(",")).expect_err("too many").contains("more than 10000")
        );
        assert!(ArraySpec::parse(&["5"; 10_001].join(",")).is_err());
        assert_eq!(ArraySpec::parse("0-9,5-14").expect("valid").indices.len(), 15);
    }

    #[test]
    fn dependencies_parse_in_both_spellings() {
        let d = parse_dependencies("ok:12,any:13,afternotok:14:15").expect("valid");
        let text: Vec<String> = d.iter().map(ToString::to_string).collect();
        assert_eq!(text, ["ok:12", "any:13", "notok:14", "notok:15"]);
        assert!(parse_dependencies("maybe:12").expect_err("bad").contains("known: ok, notok, any"));
        assert!(parse_dependencies("ok:-1").is_err());
        assert!(parse_dependencies("").is_err());
    }

    #[test]
    fn labels_and_selectors_follow_the_key_and_value_rules() {
        assert_eq!(parse_label("exp=lr-1").expect("valid"), ("exp".into(), "lr-1".into()));
        assert!(parse_label("exp").is_err());
        assert!(parse_label("-x=1").is_err());
        assert!(parse_label("x=a b").is_err());
        let s = parse_selector("a=1,b=2").expect("valid");
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn a_workdir_cannot_leave_the_job_directory() {
        assert_eq!(check_workdir("run/out"), Ok(()));
        for bad in ["/etc", "..", "a/../../b", "a//b", "./a", "", "a/."] {
            assert!(check_workdir(bad).is_err(), "{bad:?}");
        }
    }
}
