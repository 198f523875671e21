//! The devices cgroup under cgroup v2: a small `BPF_PROG_TYPE_CGROUP_DEVICE` program, written
//! here instruction by instruction and attached to a job's group with `bpf(2)`.
//!
//! cgroup v2 has no `devices.allow`: the kernel runs the programs attached to a group (and its
//! ancestors) on every open or `mknod` of a device node by a process in it, with
//! `struct bpf_cgroup_dev_ctx { u32 access_type; u32 major; u32 minor; }`, where `access_type`
//! is the device type (1 block, 2 character) in its low 16 bits and the access (1 read, 2
//! write, 4 mknod) above; a return of 0 refuses with `EPERM`. The program is the allow-list of
//! [`super::devices::allowed`], one block per rule, as runc and systemd build theirs:
//!
//! ```text
//! r2 = ctx.access_type & 0xffff    r3 = ctx.access_type >> 16
//! r4 = ctx.major                   r5 = ctx.minor
//! per rule: if r3 & ~(read|write) != 0 goto next; if r2 != type goto next;
//!           if r4 != major goto next; [if r5 != minor goto next;] return 1
//! return 0
//! ```
//!
//! It is attached with `BPF_F_ALLOW_MULTI`, so programs above the group (systemd's) still run
//! and must allow too. The agent loads an empty program once at start ([`supported`]); where the
//! kernel refuses, devices are not restricted and the agent says so. The attachment holds the
//! program: the descriptors are closed right away, and removing the group releases it.

use std::io;
use std::path::Path;

use super::devices::Rule;

/// One eBPF instruction, as the kernel takes it (`struct bpf_insn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    code: u8,
    /// Destination register in the low nibble, source in the high one.
    regs: u8,
    off: i16,
    imm: i32,
}

const LDX_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
const AND_K: u8 = 0x57; // BPF_ALU64 | BPF_AND | BPF_K
const RSH_K: u8 = 0x77; // BPF_ALU64 | BPF_RSH | BPF_K
const MOV_K: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
const MOV_X: u8 = 0xbf; // BPF_ALU64 | BPF_MOV | BPF_X
const JNE_K: u8 = 0x55; // BPF_JMP | BPF_JNE | BPF_K
const EXIT: u8 = 0x95; // BPF_JMP | BPF_EXIT

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn { code, regs: dst | (src << 4), off, imm }
}

/// `BPF_DEVCG_DEV_BLOCK`, `BPF_DEVCG_DEV_CHAR`.
fn kind(rule: &Rule) -> i32 {
    if rule.kind == 'b' { 1 } else { 2 }
}

/// The program allowing exactly `rules` (read and write, never `mknod`).
pub fn program(rules: &[Rule]) -> Vec<Insn> {
    let mut p = vec![
        insn(LDX_W, 2, 1, 0, 0),
        insn(AND_K, 2, 0, 0, 0xffff),
        insn(LDX_W, 3, 1, 0, 0),
        insn(RSH_K, 3, 0, 0, 16),
        insn(LDX_W, 4, 1, 4, 0),
        insn(LDX_W, 5, 1, 8, 0),
    ];
    for rule in rules {
        let mut checks = vec![(1, 0), (2, kind(rule)), (4, rule.major as i32)];
        if let Some(minor) = rule.minor {
            checks.push((5, minor as i32));
        }
        // Block: mov, and, one jump per check, mov r0, exit.
        let len = 2 + checks.len() + 2;
        let start = p.len();
        p.push(insn(MOV_X, 1, 3, 0, 0));
        p.push(insn(AND_K, 1, 0, 0, !3));
        for (reg, value) in checks {
            let next = (start + len) as i16 - (p.len() as i16 + 1);
            p.push(insn(JNE_K, reg, 0, next, value));
        }
        p.push(insn(MOV_K, 0, 0, 0, 1));
        p.push(insn(EXIT, 0, 0, 0, 0));
    }
    p.push(insn(MOV_K, 0, 0, 0, 0));
    p.push(insn(EXIT, 0, 0, 0, 0));
    p
}

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const BPF_CGROUP_DEVICE: u32 = 6;
const BPF_F_ALLOW_MULTI: u32 = 2;
/// The `union bpf_attr` passed: long enough for both commands, the rest zero.
const ATTR_SIZE: usize = 128;

fn put32(attr: &mut [u8; ATTR_SIZE], at: usize, v: u32) {
    attr[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

fn put64(attr: &mut [u8; ATTR_SIZE], at: usize, v: u64) {
    attr[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

#[allow(unsafe_code)] // reason: bpf(2) has no wrapper in std or libc.
fn bpf(cmd: libc::c_long, attr: &mut [u8; ATTR_SIZE]) -> io::Result<libc::c_int> {
    // SAFETY: `attr` is a zero-filled `union bpf_attr` of ATTR_SIZE bytes whose pointers (set by
    // the callers) point at memory that outlives the call.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), ATTR_SIZE) };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(rc as libc::c_int) }
}

/// Loads the program for `rules`; returns its descriptor.
#[allow(unsafe_code)] // reason: taking ownership of the descriptor bpf(2) returned.
fn load(rules: &[Rule]) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let insns = program(rules);
    let license = c"Apache-2.0";
    let mut attr = [0u8; ATTR_SIZE];
    put32(&mut attr, 0, BPF_PROG_TYPE_CGROUP_DEVICE);
    put32(&mut attr, 4, insns.len() as u32);
    put64(&mut attr, 8, insns.as_ptr() as u64);
    put64(&mut attr, 16, license.as_ptr() as u64);
    put32(&mut attr, 68, BPF_CGROUP_DEVICE);
    let fd = bpf(BPF_PROG_LOAD, &mut attr)?;
    // SAFETY: the kernel just returned this descriptor, and nothing else owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Whether this kernel loads device programs (tried once at start).
pub fn supported() -> Result<(), String> {
    load(&[]).map(drop).map_err(|e| format!("the kernel refused a BPF device program: {e}"))
}

/// Allows the group at `dir` only `rules`.
pub fn attach(dir: &Path, rules: &[Rule]) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let prog = load(rules)?;
    let group = std::fs::File::open(dir)?;
    let mut attr = [0u8; ATTR_SIZE];
    put32(&mut attr, 0, group.as_raw_fd() as u32);
    put32(&mut attr, 4, prog.as_raw_fd() as u32);
    put32(&mut attr, 8, BPF_CGROUP_DEVICE);
    put32(&mut attr, 12, BPF_F_ALLOW_MULTI);
    bpf(BPF_PROG_ATTACH, &mut attr).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the subset of eBPF that [`program`] emits on a device context.
    fn run(p: &[Insn], access_type: u32, major: u32, minor: u32) -> u64 {
        let ctx = [access_type, major, minor];
        let mut r = [0u64; 11];
        let mut pc = 0usize;
        for _ in 0..10_000 {
            let i = p[pc];
            let (dst, src) = ((i.regs & 0xf) as usize, (i.regs >> 4) as usize);
            let imm = i64::from(i.imm) as u64;
            pc += 1;
            match i.code {
                LDX_W => {
                    assert_eq!(src, 1, "loads only from the context");
                    r[dst] = u64::from(ctx[i.off as usize / 4]);
                }
                AND_K => r[dst] &= imm,
                RSH_K => r[dst] >>= imm,
                MOV_K => r[dst] = imm,
                MOV_X => r[dst] = r[src],
                JNE_K if r[dst] != imm => pc = (pc as i64 + i64::from(i.off)) as usize,
                JNE_K => {}
                EXIT => return r[0],
                other => panic!("unexpected opcode {other:#x}"),
            }
        }
        panic!("the program did not end");
    }

    const READ: u32 = 1 << 16;
    const WRITE: u32 = 2 << 16;
    const MKNOD: u32 = 4 << 16;
    const CHAR: u32 = 2;
    const BLOCK: u32 = 1;

    #[test]
    fn the_program_allows_its_rules_read_and_write_and_nothing_else() {
        let rules =
            [Rule { kind: 'c', major: 195, minor: Some(0) }, Rule { kind: 'c', major: 234, minor: None }];
        let p = program(&rules);
        assert_eq!(run(&p, CHAR | READ | WRITE, 195, 0), 1, "the granted GPU");
        assert_eq!(run(&p, CHAR | READ, 195, 1), 0, "another GPU");
        assert_eq!(run(&p, CHAR | MKNOD, 195, 0), 0, "mknod even of the granted one");
        assert_eq!(run(&p, CHAR | READ | MKNOD, 195, 0), 0);
        assert_eq!(run(&p, CHAR | WRITE, 234, 7), 1, "every minor of a wildcard rule");
        assert_eq!(run(&p, BLOCK | READ, 234, 7), 0, "a block device of the same major");
        assert_eq!(run(&p, CHAR | READ, 1, 3), 0, "not listed");
        assert_eq!(run(&program(&[]), CHAR | READ, 1, 3), 0, "an empty program refuses all");
    }

    #[test]
    fn the_agents_allow_list_compiles_to_the_same_decisions_as_its_v1_lines() {
        let rules = super::super::devices::allowed(&[1], "Character devices:\n234 nvidia-uvm\n");
        let p = program(&rules);
        for (major, minor, allowed) in [
            (195, 1, 1),
            (195, 255, 1),
            (195, 254, 1),
            (195, 0, 0),
            (195, 2, 0),
            (234, 1, 1),
            (1, 3, 1),
            (136, 4, 1),
            (8, 0, 0),
        ] {
            assert_eq!(run(&p, CHAR | READ | WRITE, major, minor), allowed, "{major}:{minor}");
        }
    }

    #[test]
    fn instructions_are_encoded_as_the_kernel_reads_them() {
        assert_eq!(std::mem::size_of::<Insn>(), 8);
        let i = insn(JNE_K, 4, 0, 3, 195);
        // SAFETY: `Insn` is `repr(C)`, 8 bytes, without padding.
        #[allow(unsafe_code)] // reason: reading the instruction's bytes as the kernel will.
        let bytes: [u8; 8] = unsafe { std::mem::transmute(i) };
        let mut expected = vec![0x55, 0x04];
        expected.extend(3i16.to_ne_bytes());
        expected.extend(195i32.to_ne_bytes());
        assert_eq!(bytes.to_vec(), expected);
        assert_eq!(insn(LDX_W, 5, 1, 8, 0).regs, 0x15, "dst low, src high");
    }
}
