#!/usr/bin/env python3
"""A fake kubelet pod-resources endpoint for `gantry exporter`, built from none of Gantry's code.

It compiles the pod-resources v1 API from the .proto with grpcio-tools at run time and serves
`v1.PodResourcesLister/List` on a unix socket, answering with the pods given on the command line,
as a kubelet does. Prints `ready` once serving; runs until killed.

Usage: fake_pod_resources.py PROTO SOCKET PODS_JSON
  PODS_JSON: [{"namespace", "name", "containers": [{"name", "devices": [{"resource", "ids"}]}]}]
"""
import json
import os
import sys
import tempfile
import time
from concurrent import futures

import grpc
from grpc_tools import protoc


def compile_proto(proto):
    out = tempfile.mkdtemp(prefix="fake-pod-resources-")
    include = os.path.dirname(os.path.abspath(proto))
    grpc_include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    rc = protoc.main(["grpc_tools.protoc", f"-I{include}", f"-I{grpc_include}", f"--python_out={out}",
                      f"--grpc_python_out={out}", os.path.abspath(proto)])
    if rc != 0:
        print(f"fake-pod-resources: grpc_tools.protoc failed on {proto} ({rc})", flush=True)
        sys.exit(1)
    sys.path.insert(0, out)
    name = os.path.splitext(os.path.basename(proto))[0]
    return __import__(f"{name}_pb2"), __import__(f"{name}_pb2_grpc")


def main():
    proto, socket, pods = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    pb, rpc = compile_proto(proto)

    def answer():
        return pb.ListPodResourcesResponse(pod_resources=[
            pb.PodResources(name=p["name"], namespace=p["namespace"], containers=[
                pb.ContainerResources(name=c["name"], devices=[
                    pb.ContainerDevices(resource_name=d["resource"], device_ids=d["ids"])
                    for d in c.get("devices", [])
                ]) for c in p["containers"]
            ]) for p in pods
        ])

    class Lister(rpc.PodResourcesListerServicer):
        def List(self, request, context):
            return answer()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    rpc.add_PodResourcesListerServicer_to_server(Lister(), server)
    server.add_insecure_port(f"unix:{socket}")
    server.start()
    print("ready", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
