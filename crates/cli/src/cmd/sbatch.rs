//! `#SBATCH` lines, read like `#GANTRY` lines so that a Slurm batch script runs as it is.
//!
//! Each common `sbatch` option maps to the Gantry flag that means the same: `-J/--job-name` to
//! `--name`, `--gres=gpu[:MODEL]:N` and `-G/--gpus=[MODEL:]N` to `--gpus` (and `--gpu-model`),
//! `-c/--cpus-per-task` to `--cpu`, `--mem` to `--memory` (Slurm's units: a plain number is MiB),
//! `-t/--time`, `-a/--array`, `-d/--dependency=afterok:…` to `--after ok:…`, and a relative
//! `-D/--chdir` to `--workdir`. Options whose meaning Gantry keeps otherwise (`-o/-e`: the output
//! is kept by the server, `gantry logs`) and every other option are not applied, each with a
//! warning naming it; a value Gantry cannot honour (an absolute `--chdir`, `afterburstbuffer`) is
//! refused with a sentence. The `#GANTRY` lines come after the `#SBATCH` lines, so they win on a
//! conflict, and the command line wins over both.

use anyhow::bail;

/// What a script's `#SBATCH` lines say: Gantry flags, and warnings for the options not applied.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Translated {
    /// Gantry flags and their values, in order.
    pub flags: Vec<String>,
    /// One sentence per option not applied.
    pub warnings: Vec<String>,
}

/// Translates the words of `#SBATCH` lines (`-J x`, `--mem=2G`, …).
pub fn translate(words: &[String]) -> anyhow::Result<Translated> {
    let mut out = Translated::default();
    let mut i = 0;
    while i < words.len() {
        let word = &words[i];
        let (option, inline) = match word.split_once('=') {
            Some((o, v)) if o.starts_with("--") => (o, Some(v.to_owned())),
            _ => (word.as_str(), None),
        };
        let takes_value = takes_value(option);
        let value = match (&inline, takes_value) {
            (Some(v), _) => Some(v.clone()),
            (None, true) => {
                i += 1;
                match words.get(i) {
                    Some(v) => Some(v.clone()),
                    None => bail!("#SBATCH {option} needs a value"),
                }
            }
            (None, false) => None,
        };
        apply(option, value.as_deref(), &mut out)?;
        i += 1;
    }
    Ok(out)
}

/// Options of `sbatch` that take a value (so the next word is theirs).
fn takes_value(option: &str) -> bool {
    const SHORT: &[&str] =
        &["-J", "-G", "-c", "-t", "-a", "-d", "-D", "-o", "-e", "-p", "-A", "-N", "-n", "-q", "-w"];
    SHORT.contains(&option) || (option.starts_with("--") && !FLAGS.contains(&option))
}

/// Long options of `sbatch` that take no value.
const FLAGS: &[&str] =
    &["--exclusive", "--requeue", "--no-requeue", "--wait", "--hold", "--parsable", "--test-only"];

fn apply(option: &str, value: Option<&str>, out: &mut Translated) -> anyhow::Result<()> {
    let v = value.unwrap_or_default();
    let mut push = |flag: &str, value: String| out.flags.extend([flag.to_owned(), value]);
    match option {
        "-J" | "--job-name" => push("--name", v.to_owned()),
        "--gres" => {
            let (model, n) = gres(v)?;
            push("--gpus", n);
            if let Some(model) = model {
                push("--gpu-model", model);
            }
        }
        "-G" | "--gpus" => {
            let (model, n) = match v.rsplit_once(':') {
                Some((model, n)) => (Some(model.to_owned()), n.to_owned()),
                None => (None, v.to_owned()),
            };
            push("--gpus", n);
            if let Some(model) = model {
                push("--gpu-model", model);
            }
        }
        "-c" | "--cpus-per-task" => push("--cpu", v.to_owned()),
        "--mem" => push("--memory", slurm_size(v)?),
        "-t" | "--time" => push("--time", v.to_owned()),
        "-a" | "--array" => push("--array", v.to_owned()),
        "-d" | "--dependency" => push("--after", dependency(v)?),
        "-D" | "--chdir" => {
            if v.starts_with('/') {
                bail!(
                    "#SBATCH --chdir={v}: a job starts in its own private directory on its node; \
                     use a relative directory inside it (--workdir) or `cd` to shared storage in the script"
                );
            }
            push("--workdir", v.to_owned());
        }
        // pyxis's name for a job's image.
        "--container-image" => push("--image", pyxis_image(v)),
        "--container-workdir" => push("--container-workdir", v.to_owned()),
        "-o" | "--output" | "-e" | "--error" => out.warnings.push(format!(
            "#SBATCH {option} is not applied: Gantry keeps the job's output itself (gantry logs ID)"
        )),
        other => out.warnings.push(format!(
            "#SBATCH {other} is not applied: Gantry has no equivalent (see `gantry submit --help`)"
        )),
    }
    Ok(())
}

/// pyxis/enroot write a registry's host before `#` (`nvcr.io#nvidia/pytorch:24.05-py3`); Docker
/// writes `/`.
fn pyxis_image(value: &str) -> String {
    value.replacen('#', "/", 1)
}

/// `gpu:2`, `gpu:a100:2` or `gpu` (one) → (model, count).
fn gres(value: &str) -> anyhow::Result<(Option<String>, String)> {
    let parts: Vec<&str> = value.split(':').collect();
    match parts.as_slice() {
        ["gpu"] => Ok((None, "1".into())),
        ["gpu", n] if n.parse::<u32>().is_ok() => Ok((None, (*n).to_owned())),
        ["gpu", model] => Ok((Some((*model).to_owned()), "1".into())),
        ["gpu", model, n] => Ok((Some((*model).to_owned()), (*n).to_owned())),
        _ => bail!("#SBATCH --gres={value}: only GPUs can be asked for (gpu:N or gpu:MODEL:N)"),
    }
}

/// Slurm's `--mem`: a number with an optional K, M, G or T suffix, MiB when plain.
fn slurm_size(value: &str) -> anyhow::Result<String> {
    match super::submit::parse_mib(value) {
        Ok(mib) => Ok(mib.to_string()),
        Err(e) => bail!("#SBATCH --mem={value}: {e}"),
    }
}

/// `afterok:12:13,afterany:14` → `ok:12,ok:13,any:14`.
fn dependency(value: &str) -> anyhow::Result<String> {
    let mut deps = Vec::new();
    for part in value.split([',', '?']) {
        let mut fields = part.split(':');
        let kind = match fields.next().unwrap_or_default() {
            "afterok" => "ok",
            "afternotok" => "notok",
            "afterany" | "after" => "any",
            other => bail!(
                "#SBATCH --dependency={value}: `{other}` has no Gantry equivalent (afterok, afternotok, afterany)"
            ),
        };
        for id in fields {
            deps.push(format!("{kind}:{}", id.split('+').next().unwrap_or(id)));
        }
    }
    Ok(deps.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn the_common_options_map_to_gantry_flags() {
        let t = translate(&words("--gres=gpu:2 -J x --time=00:01:00 --mem=2G -c 4 -a 0-9%2")).expect("ok");
        let flags = t.flags.join(" ");
        assert_eq!(flags, "--gpus 2 --name x --time 00:01:00 --memory 2048 --cpu 4 --array 0-9%2");
        assert!(t.warnings.is_empty());
    }

    #[test]
    fn gpu_models_dependencies_and_chdir_are_mapped() {
        let t = translate(&words("--gres=gpu:a100:4 -d afterok:12:13,afterany:14 --chdir=out -G h100:2"))
            .expect("ok");
        assert_eq!(
            t.flags.join(" "),
            "--gpus 4 --gpu-model a100 --after ok:12,ok:13,any:14 --workdir out --gpus 2 --gpu-model h100"
        );
    }

    #[test]
    fn pyxis_container_images_are_honoured_in_either_spelling() {
        for (line, image) in [
            ("--container-image=nvcr.io#nvidia/pytorch:24.05-py3", "nvcr.io/nvidia/pytorch:24.05-py3"),
            ("--container-image ubuntu:22.04", "ubuntu:22.04"),
        ] {
            let t = translate(&words(line)).expect("translated");
            assert_eq!(t.flags, ["--image", image], "{line}");
            assert!(t.warnings.is_empty(), "{line}");
        }
    }

    #[test]
    fn other_options_are_named_in_a_warning_and_bad_values_refused() {
        let t = translate(&words("-p gpu --exclusive -o out.log --ntasks=4")).expect("ok");
        assert!(t.flags.is_empty());
        let all = t.warnings.join("\n");
        for option in ["-p", "--exclusive", "-o", "--ntasks"] {
            assert!(all.contains(&format!("#SBATCH {option} is not applied")), "{all}");
        }
        assert!(translate(&words("--chdir=/scratch")).is_err());
        assert!(translate(&words("--dependency=singleton")).is_err());
        assert!(translate(&words("--gres=nic:1")).is_err());
        assert!(translate(&words("-J")).is_err(), "a missing value");
        assert!(translate(&words("--mem=lots")).is_err());
    }
}
