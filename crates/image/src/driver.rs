//! The NVIDIA driver's user-space half inside a container: what `nvidia-ctk cdi generate` puts
//! in a CDI spec's container edits, found the same way (the dynamic linker's cache, `ldconfig
//! -p`) and given to the runtime as read-only bind mounts at the same paths. Images do not ship
//! the driver's libraries (they must match the node's kernel module), so without these a CUDA
//! image sees its GPU's device node and cannot use it.

use std::path::{Path, PathBuf};

/// Library name prefixes of the driver (the NVIDIA Container Toolkit's list, compute and
/// utility capabilities).
const LIBRARIES: &[&str] = &[
    "libcuda.so",
    "libcudadebugger.so",
    "libnvidia-ml.so",
    "libnvidia-ptxjitcompiler.so",
    "libnvidia-nvvm.so",
    "libnvidia-gpucomp.so",
    "libnvidia-allocator.so",
    "libnvidia-cfg.so",
    "libnvidia-opencl.so",
    "libnvidia-pkcs11.so",
    "libnvidia-pkcs11-openssl3.so",
];

/// The driver's programs a container may run (`nvidia-smi` above all).
const PROGRAMS: &[&str] = &[
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
];

/// The driver's libraries the linker cache names (64-bit x86 only), from `ldconfig -p`'s output:
/// each path as the cache gives it (the soname's link and the versioned file both).
pub fn libraries(ldconfig_output: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = ldconfig_output
        .lines()
        .filter_map(|line| {
            let (left, path) = line.split_once(" => ")?;
            let name = left.split_whitespace().next()?;
            let x86_64 = left.contains("x86-64");
            let ours = LIBRARIES.iter().any(|prefix| name.starts_with(prefix));
            (x86_64 && ours).then(|| PathBuf::from(path.trim()))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Read-only binds for the driver's libraries and programs found on this node: each library
/// path the cache names (its final file bound at that path, so a soname link in the container is
/// the file itself) and each program on the usual `PATH` directories.
pub fn binds(ldconfig_output: &str, bin_dirs: &[&Path]) -> Vec<crate::bundle::Bind> {
    let mut binds = Vec::new();
    for path in libraries(ldconfig_output) {
        let Ok(real) = std::fs::canonicalize(&path) else { continue };
        if real.is_file() {
            binds.push(crate::bundle::Bind {
                source: real,
                destination: path.display().to_string(),
                readonly: true,
            });
        }
    }
    for program in PROGRAMS {
        if let Some(found) = bin_dirs.iter().map(|d| d.join(program)).find(|p| p.is_file()) {
            let Ok(real) = std::fs::canonicalize(&found) else { continue };
            binds.push(crate::bundle::Bind {
                source: real,
                destination: found.display().to_string(),
                readonly: true,
            });
        }
    }
    binds
}

/// The binds for this node's driver (`ldconfig -p` run now; none where there is no driver).
pub fn node_binds() -> Vec<crate::bundle::Bind> {
    let out = ["/sbin/ldconfig", "/usr/sbin/ldconfig", "/sbin/ldconfig.real"]
        .iter()
        .find(|p| Path::new(p).is_file())
        .and_then(|p| std::process::Command::new(p).arg("-p").output().ok());
    let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    binds(&text, &[Path::new("/usr/bin"), Path::new("/usr/local/bin"), Path::new("/usr/sbin")])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drivers_libraries_are_found_in_the_linker_cache_and_bound_read_only() {
        let dir = tempfile::tempdir().expect("temp dir");
        let real = dir.path().join("libcuda.so.550.54.15");
        std::fs::write(&real, b"ELF").expect("lib");
        let link = dir.path().join("libcuda.so.1");
        std::os::unix::fs::symlink(&real, &link).expect("link");
        let ml = dir.path().join("libnvidia-ml.so.1");
        std::fs::write(&ml, b"ELF").expect("lib");
        let smi = dir.path().join("nvidia-smi");
        std::fs::write(&smi, b"#!").expect("program");
        let cache = format!(
            "4 libs found in cache `/etc/ld.so.cache'\n\
             \tlibcuda.so.1 (libc6,x86-64) => {}\n\
             \tlibcuda.so.1 (libc6) => /usr/lib/i386-linux-gnu/libcuda.so.1\n\
             \tlibnvidia-ml.so.1 (libc6,x86-64) => {}\n\
             \tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1\n",
            link.display(),
            ml.display()
        );
        assert_eq!(libraries(&cache), vec![link.clone(), ml.clone()], "64-bit driver libraries only");
        let binds = binds(&cache, &[dir.path()]);
        let pairs: Vec<(PathBuf, String, bool)> =
            binds.iter().map(|b| (b.source.clone(), b.destination.clone(), b.readonly)).collect();
        assert_eq!(
            pairs,
            vec![
                (real.canonicalize().expect("real"), link.display().to_string(), true),
                (ml.canonicalize().expect("real"), ml.display().to_string(), true),
                (smi.canonicalize().expect("real"), smi.display().to_string(), true),
            ]
        );
        assert!(super::binds("", &[]).is_empty(), "no driver: nothing bound");
    }
}
