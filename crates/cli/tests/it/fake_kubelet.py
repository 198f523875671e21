#!/usr/bin/env python3
"""A fake kubelet for `gantry device-plugin`, built from none of Gantry's code.

It compiles the device plugin API from the .proto with grpcio-tools (python -m grpc_tools.protoc)
at run time, serves `v1beta1.Registration` on kubelet.sock as the kubelet does, and drives the
plugin through the kubelet's side of the API: registration, ListAndWatch, a fatal XID (by moving
the fake NVML clock past a scripted event) and the GPU's recovery, GetPreferredAllocation,
Allocate, and a kubelet restart (kubelet.sock and the plugin sockets deleted, kubelet.sock
re-created). Prints one line per check; exits 0 when every check passed, 1 on the first failure.

Usage: fake_kubelet.py SPEC_JSON   where SPEC_JSON holds
  proto   path of deviceplugin_v1beta1.proto      dir     the device-plugins directory
  clock   fake NVML clock file to write            xid_at  fake time at which GPU 0 gets XID 79
  whole   UUIDs of the whole GPUs, in index order  nvlink_pair  the two of them joined by NVLink
  slice_uuid, slice_index, slice_mib   the GPU offered as memory
"""
import json
import os
import queue
import sys
import tempfile
import threading
import time
from concurrent import futures

import grpc
from grpc_tools import protoc

TIMEOUT = 90.0
MAX_MESSAGE = 64 * 1024 * 1024


def log(msg):
    print(f"fake-kubelet: {msg}", flush=True)


def fail(msg):
    print(f"fake-kubelet: FAIL: {msg}", flush=True)
    os._exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)
    log(f"ok: {msg}")


def compile_proto(proto):
    out = tempfile.mkdtemp(prefix="fake-kubelet-")
    include = os.path.dirname(os.path.abspath(proto))
    grpc_include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    rc = protoc.main(["grpc_tools.protoc", f"-I{include}", f"-I{grpc_include}", f"--python_out={out}",
                      f"--grpc_python_out={out}", os.path.abspath(proto)])
    if rc != 0:
        fail(f"grpc_tools.protoc failed on {proto} ({rc})")
    sys.path.insert(0, out)
    name = os.path.splitext(os.path.basename(proto))[0]
    return __import__(f"{name}_pb2"), __import__(f"{name}_pb2_grpc")


def main():
    spec = json.loads(sys.argv[1])
    pb, pbg = compile_proto(spec["proto"])
    d = spec["dir"]
    kubelet_sock = os.path.join(d, "kubelet.sock")

    class Registration(pbg.RegistrationServicer):
        def __init__(self):
            self.requests = queue.Queue()

        def Register(self, request, context):
            if request.version != "v1beta1":
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unsupported version {request.version}")
            self.requests.put(request)
            return pb.Empty()

    def start_kubelet():
        reg = Registration()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pbg.add_RegistrationServicer_to_server(reg, server)
        server.add_insecure_port(f"unix://{kubelet_sock}")
        server.start()
        return reg, server

    def await_registrations(reg, what):
        got = {}
        deadline = time.monotonic() + TIMEOUT
        while len(got) < 2:
            left = deadline - time.monotonic()
            if left <= 0:
                fail(f"{what}: only {sorted(got)} registered within {TIMEOUT}s")
            try:
                r = reg.requests.get(timeout=left)
            except queue.Empty:
                continue
            got[r.resource_name] = r
        check(set(got) == {"gantry.dev/gpu", "gantry.dev/gpu-memory"}, f"{what}: both resources registered")
        for r in got.values():
            check(r.version == "v1beta1" and r.options.get_preferred_allocation_available,
                  f"{what}: {r.resource_name} registers v1beta1 with preferred allocation")
            check(os.path.exists(os.path.join(d, r.endpoint)), f"{what}: endpoint {r.endpoint} exists in the directory")
        return got

    def connect(endpoint):
        # Like the kubelet (Go gRPC dials unix sockets with authority "localhost"); gRPC core would
        # otherwise send the socket path as :authority, which is not a valid HTTP/2 authority.
        ch = grpc.insecure_channel(f"unix://{os.path.join(d, endpoint)}",
                                   options=[("grpc.default_authority", "localhost"),
                                            ("grpc.max_receive_message_length", MAX_MESSAGE),
                                            ("grpc.max_send_message_length", MAX_MESSAGE)])
        return pbg.DevicePluginStub(ch), ch

    def watch(stub):
        q = queue.Queue()
        stream = stub.ListAndWatch(pb.Empty())

        def pump():
            try:
                for resp in stream:
                    q.put({dev.ID: dev.health for dev in resp.devices})
            except grpc.RpcError as e:
                q.put(e)

        threading.Thread(target=pump, daemon=True).start()
        return q, stream

    def wait_list(q, pred, what):
        deadline = time.monotonic() + TIMEOUT
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                fail(f"timed out waiting for {what}")
            try:
                item = q.get(timeout=left)
            except queue.Empty:
                continue
            if isinstance(item, Exception):
                fail(f"ListAndWatch ended while waiting for {what}: {item}")
            if pred(item):
                log(f"ok: {what}")
                return item

    whole = spec["whole"]
    u0 = whole[0]
    slice_prefix = f"{spec['slice_index']}-"

    # 1. Registration.
    reg, server = start_kubelet()
    regs = await_registrations(reg, "start")
    gpu, gpu_ch = connect(regs["gantry.dev/gpu"].endpoint)
    mem, mem_ch = connect(regs["gantry.dev/gpu-memory"].endpoint)
    opts = gpu.GetDevicePluginOptions(pb.Empty(), timeout=10)
    check(opts.get_preferred_allocation_available and not opts.pre_start_required, "GetDevicePluginOptions")

    # 2. ListAndWatch: the whole GPUs by UUID and one device per MiB of the sliced GPU, all healthy.
    gq, gstream = watch(gpu)
    wait_list(gq, lambda l: sorted(l) == sorted(whole) and all(h == "Healthy" for h in l.values()),
              "gantry.dev/gpu lists the whole GPUs by UUID, all Healthy")
    mq, mstream = watch(mem)
    mlist = wait_list(mq, lambda l: len(l) == spec["slice_mib"] and all(k.startswith(slice_prefix) for k in l)
                      and all(h == "Healthy" for h in l.values()),
                      f"gantry.dev/gpu-memory lists {spec['slice_mib']} MiB devices of GPU {spec['slice_index']}")

    # 3. GetPreferredAllocation: an aligned pair first; with a must-include, its NVLink peer.
    def preferred(available, must, size):
        req = pb.PreferredAllocationRequest(container_requests=[pb.ContainerPreferredAllocationRequest(
            available_deviceIDs=available, must_include_deviceIDs=must, allocation_size=size)])
        return list(gpu.GetPreferredAllocation(req, timeout=10).container_responses[0].deviceIDs)

    check(preferred(whole, [], 2) == whole[:2], f"preferred 2 of {len(whole)}: the aligned pair {whole[:2]}")
    a, b = spec["nvlink_pair"]
    check(preferred(whole, [b], 2) == [a, b], f"preferred 2 including {b}: its NVLink peer {a}")

    # 4. A fatal XID on GPU 0: Unhealthy, refused by Allocate, then Healthy again after recovery.
    with open(spec["clock"], "w") as f:
        f.write(str(spec["xid_at"]))
    log(f"fake NVML clock moved to {spec['xid_at']} s: XID 79 on {u0}")
    wait_list(gq, lambda l: l.get(u0) == "Unhealthy" and all(l[u] == "Healthy" for u in whole[1:]),
              f"{u0} turns Unhealthy on XID 79, the others stay Healthy")
    try:
        gpu.Allocate(pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=[u0])]),
                     timeout=10)
        fail("Allocate gave out an unhealthy GPU")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.FAILED_PRECONDITION, f"Allocate refuses the unhealthy GPU ({e.details()})")
    wait_list(gq, lambda l: all(h == "Healthy" for h in l.values()), f"{u0} is Healthy again after recovery")

    # 5. Allocate: the variables for whole GPUs and for a slice; unknown devices refused.
    resp = gpu.Allocate(pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=whole[:2])]),
                        timeout=10)
    envs = dict(resp.container_responses[0].envs)
    check(envs.get("NVIDIA_VISIBLE_DEVICES") == ",".join(whole[:2]), f"NVIDIA_VISIBLE_DEVICES={envs}")
    check(envs.get("CUDA_VISIBLE_DEVICES") == ",".join(whole[:2]), "CUDA_VISIBLE_DEVICES names the same GPUs")
    units = sorted(mlist, key=lambda k: int(k.split("-")[1]))[:1024]
    resp = mem.Allocate(pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=units)]),
                        timeout=10)
    envs = dict(resp.container_responses[0].envs)
    check(envs.get("NVIDIA_VISIBLE_DEVICES") == spec["slice_uuid"], "a slice sees its GPU")
    check(envs.get("GANTRY_GPU_MEMORY_LIMIT_MIB") == "1024", "a 1024 MiB slice gets GANTRY_GPU_MEMORY_LIMIT_MIB=1024")
    check(envs.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT") == "0=1024M", "and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1024M")
    try:
        gpu.Allocate(pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=["GPU-nope"])]),
                     timeout=10)
        fail("Allocate accepted an unknown device")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.INVALID_ARGUMENT, f"Allocate refuses an unknown device ({e.details()})")

    # 6. Kubelet restart: the kubelet goes away, empties the directory and comes back.
    gstream.cancel()
    mstream.cancel()
    gpu_ch.close()
    mem_ch.close()
    server.stop(0).wait()
    for name in os.listdir(d):
        if name.endswith(".sock"):
            os.unlink(os.path.join(d, name))
    log("kubelet stopped; kubelet.sock and the plugin sockets deleted")
    time.sleep(1.0)
    reg, server = start_kubelet()
    log("kubelet.sock re-created")
    regs = await_registrations(reg, "after the kubelet restart")
    gpu, gpu_ch = connect(regs["gantry.dev/gpu"].endpoint)
    gq, gstream = watch(gpu)
    wait_list(gq, lambda l: sorted(l) == sorted(whole) and all(h == "Healthy" for h in l.values()),
              "ListAndWatch works on the re-created socket")
    gstream.cancel()
    gpu_ch.close()
    print("fake-kubelet: ALL CHECKS PASSED", flush=True)
    # Leave kubelet.sock in place; the test stops the plugin with SIGTERM next.
    server.stop(0).wait()


if __name__ == "__main__":
    main()
