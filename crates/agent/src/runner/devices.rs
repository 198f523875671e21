//! Which device nodes a job may open: its own GPUs, the NVIDIA control devices and the basics.
//!
//! `CUDA_VISIBLE_DEVICES` is advice: a job that opens `/dev/nvidia3` itself uses a GPU it was
//! not granted. A devices cgroup (Slurm's `ConstrainDevices=yes`, systemd's `DeviceAllow=`)
//! makes the grant binding: the kernel refuses (`EPERM`) to open any character or block
//! device not allowed to the job's group, whatever the node's file modes say.
//!
//! A job may read and write (never `mknod`):
//! - `/dev/nvidiaN` (major 195, minor N) of each GPU it was granted. The minor is the driver's
//!   (`Device Minor` in `/proc/driver/nvidia/gpus/<bus id>/information`), which usually but not
//!   always equals the NVML index; a simulated fleet's GPU `i` has minor `i`;
//! - `nvidiactl` (195:255) and `nvidia-modeset` (195:254), every minor of `nvidia-uvm` and
//!   `nvidia-caps` (their majors are dynamic, read from `/proc/devices`): CUDA needs them;
//! - `null`, `zero`, `full`, `random`, `urandom`, `tty`, `ptmx` and the pseudo-terminals.
//!
//! cgroup v1 takes these as lines in `devices.allow` after `a` in `devices.deny`
//! ([`Rule::v1`]); cgroup v2 has no such file and takes a `BPF_PROG_TYPE_CGROUP_DEVICE`
//! program built from the same rules ([`super::bpf_devices`]). Where neither works, devices are
//! not restricted, and the agent says so at start.

use std::collections::BTreeMap;

/// NVIDIA's character device major.
pub const NVIDIA_MAJOR: u32 = 195;

/// One device (or every minor of a major) a job may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// `'c'` (character) or `'b'` (block).
    pub kind: char,
    /// Major number.
    pub major: u32,
    /// Minor number (`None`: all).
    pub minor: Option<u32>,
}

impl Rule {
    const fn char(major: u32, minor: u32) -> Self {
        Self { kind: 'c', major, minor: Some(minor) }
    }

    /// The `devices.allow` line.
    pub fn v1(&self) -> String {
        match self.minor {
            Some(minor) => format!("{} {}:{minor} rw", self.kind, self.major),
            None => format!("{} {}:* rw", self.kind, self.major),
        }
    }
}

/// `null`, `zero`, `full`, `random`, `urandom`, `tty`, `ptmx`, and (below) every pty.
const BASICS: &[Rule] = &[
    Rule::char(1, 3),
    Rule::char(1, 5),
    Rule::char(1, 7),
    Rule::char(1, 8),
    Rule::char(1, 9),
    Rule::char(5, 0),
    Rule::char(5, 2),
];

/// The major of the pseudo-terminal slaves (`/dev/pts/*`).
const PTS_MAJOR: u32 = 136;

/// The devices a job granted the GPUs of driver minors `gpus` may use; `proc_devices` is the
/// text of `/proc/devices` (for the dynamic majors of `nvidia-uvm` and `nvidia-caps`).
pub fn allowed(gpus: &[u32], proc_devices: &str) -> Vec<Rule> {
    let mut rules = BASICS.to_vec();
    rules.push(Rule { kind: 'c', major: PTS_MAJOR, minor: None });
    rules.extend(gpus.iter().map(|&minor| Rule::char(NVIDIA_MAJOR, minor)));
    rules.push(Rule::char(NVIDIA_MAJOR, 255));
    rules.push(Rule::char(NVIDIA_MAJOR, 254));
    for name in ["nvidia-uvm", "nvidia-caps"] {
        if let Some(major) = char_major(proc_devices, name) {
            rules.push(Rule { kind: 'c', major, minor: None });
        }
    }
    rules
}

/// The major of character device `name` in `/proc/devices`' text.
fn char_major(proc_devices: &str, name: &str) -> Option<u32> {
    proc_devices
        .lines()
        .skip_while(|l| !l.starts_with("Character devices"))
        .take_while(|l| !l.starts_with("Block devices"))
        .filter_map(|l| l.trim().split_once(' '))
        .find(|(_, n)| n.trim() == name)
        .and_then(|(major, _)| major.parse().ok())
}

/// The driver's minor of the GPU at `pci_bus_id` (NVML's `00000000:18:00.0` form), from
/// `/proc/driver/nvidia/gpus/0000:18:00.0/information`; `None` without the driver.
pub fn nvidia_minor(pci_bus_id: &str) -> Option<u32> {
    let id = pci_bus_id.to_ascii_lowercase();
    let short = id.get(id.len().checked_sub(12)?..)?;
    let info = std::fs::read_to_string(format!("/proc/driver/nvidia/gpus/{short}/information")).ok()?;
    parse_minor(&info)
}

fn parse_minor(information: &str) -> Option<u32> {
    information.lines().find_map(|l| l.strip_prefix("Device Minor:")).and_then(|m| m.trim().parse().ok())
}

/// The minors of the GPUs `uuids`, from the node's `uuid → minor` map; a GPU it does not know
/// gets no device (the job cannot open it).
pub fn minors_of(uuids: &[String], minors: &BTreeMap<String, u32>) -> Vec<u32> {
    uuids.iter().filter_map(|u| minors.get(u).copied()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROC_DEVICES: &str = "Character devices:\n  1 mem\n  5 /dev/tty\n195 nvidia\n195 nvidiactl\n\
        234 nvidia-uvm\n237 nvidia-caps\n\nBlock devices:\n  7 loop\n240 nvidia-uvm\n";

    #[test]
    fn a_job_may_use_its_own_gpus_the_control_devices_and_the_basics_only() {
        let lines: Vec<String> = allowed(&[2], PROC_DEVICES).iter().map(Rule::v1).collect();
        for wanted in [
            "c 195:2 rw",
            "c 195:255 rw",
            "c 195:254 rw",
            "c 234:* rw",
            "c 237:* rw",
            "c 1:3 rw",
            "c 136:* rw",
        ] {
            assert!(lines.iter().any(|l| l == wanted), "{wanted} missing from {lines:?}");
        }
        for other in ["c 195:0 rw", "c 195:1 rw", "c 195:* rw", "c 240:* rw"] {
            assert!(!lines.iter().any(|l| l == other), "{other} allowed: {lines:?}");
        }
        assert!(lines.iter().all(|l| !l.contains('m') && !l.starts_with('b')), "no mknod, no block device");
    }

    #[test]
    fn without_the_driver_no_dynamic_major_is_allowed() {
        let lines: Vec<String> = allowed(&[], "Character devices:\n  1 mem\n").iter().map(Rule::v1).collect();
        assert!(!lines.iter().any(|l| l.ends_with(":* rw") && !l.starts_with("c 136")), "{lines:?}");
    }

    #[test]
    fn the_drivers_minor_is_read_from_its_information_file() {
        let info = "Model: \t\t NVIDIA H100\nIRQ:   \t\t 42\nDevice Minor: \t 3\nBus Type: \t PCIe\n";
        assert_eq!(parse_minor(info), Some(3));
        let minors = BTreeMap::from([("GPU-a".to_owned(), 3), ("GPU-b".to_owned(), 0)]);
        assert_eq!(minors_of(&["GPU-b".into(), "GPU-x".into()], &minors), [0]);
    }
}
