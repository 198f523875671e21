//! Generates the kubelet device plugin API and the pod-resources API (clients and servers) from
//! `proto/` with protox, a protobuf compiler in Rust, so no `protoc` is needed on the build machine.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["deviceplugin_v1beta1.proto", "podresources_v1.proto"], ["proto"])?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}
