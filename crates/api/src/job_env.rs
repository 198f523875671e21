//! Which environment variables a job may declare.
//!
//! A job's environment is built by the agent from an allow-list (see the agent's sandbox): the
//! job's own declared variables plus the few the agent sets to describe the placement. The
//! placement variables are how GPU grants are enforced (`CUDA_VISIBLE_DEVICES`, the MPS limits)
//! and how a job learns who it is (`GANTRY_*`), so a declared variable must never replace them.
//! The rule lives here, beside [`crate::types::Assignment`], so that the submit handler and
//! the agent check the same thing: the server refuses a bad submission with a sentence, and the
//! agent refuses to start an assignment that slipped past (an older server).

/// Names a job may not declare, exactly: the GPU grant and the rendezvous of a gang's workers
/// (a worker that could set its own `RANK` or `MASTER_ADDR` could join or hijack another gang's
/// rendezvous).
const RESERVED: &[&str] = &[
    "CUDA_VISIBLE_DEVICES",
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "NNODES",
];

/// Prefixes a job may not declare: the agent's own variables, the MPS share limits, and the
/// launch variables of torchrun (`PET_*`) and Slurm (`SLURM_*`) Gantry sets.
const RESERVED_PREFIXES: &[&str] = &["GANTRY_", "CUDA_MPS_", "PET_", "SLURM_"];

/// Names under a reserved prefix a job may declare: the simulated fleet's utilisation profile
/// (`idle`, `steady`, `bursty`, `input_stall:SHARE`), which only the simulated GPU backend reads.
const ALLOWED: &[&str] = &["GANTRY_SIM_PROFILE"];

/// Checks one declared variable; the error is a sentence naming the variable.
pub fn check(name: &str, value: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let well_formed = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !well_formed {
        return Err(format!("env: `{name}` is not a variable name ([A-Za-z_][A-Za-z0-9_]*)"));
    }
    let reserved = RESERVED.contains(&name) || RESERVED_PREFIXES.iter().any(|p| name.starts_with(p));
    if reserved && !ALLOWED.contains(&name) {
        return Err(format!("env: `{name}` is set by Gantry and cannot be declared by a job"));
    }
    if value.contains('\0') {
        return Err(format!("env: the value of `{name}` contains a NUL byte"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn ordinary_names_are_accepted() {
        for name in ["PATH", "_x", "OMP_NUM_THREADS", "a1"] {
            assert_eq!(check(name, "v"), Ok(()), "{name}");
        }
    }

    #[test]
    fn malformed_names_are_refused() {
        for name in ["", "1A", "A-B", "A=B", "A B", "É"] {
            assert!(check(name, "v").is_err(), "{name:?}");
        }
    }

    #[test]
    fn names_that_would_override_the_placement_are_refused() {
        for name in [
            "CUDA_VISIBLE_DEVICES",
            "GANTRY_JOB_ID",
            "GANTRY_GPU_MEMORY_LIMIT_MIB",
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
            "MASTER_ADDR",
            "MASTER_PORT",
            "WORLD_SIZE",
            "RANK",
            "LOCAL_RANK",
        ] {
            let err = check(name, "v").expect_err(name);
            assert!(err.contains("set by Gantry"), "{err}");
        }
    }

    #[test]
    fn the_simulated_fleets_profile_may_be_declared() {
        assert_eq!(check("GANTRY_SIM_PROFILE", "idle"), Ok(()));
    }

    #[test]
    fn a_nul_byte_in_a_value_is_refused() {
        assert!(check("A", "x\0y").is_err());
    }
}
