"""A grpcio client that starts a long command and then is frozen by the test
(SIGSTOP): it prints "executing <pid>" once the command runs, then keeps
reading; resumed, it prints how its stream ended.

Usage: frozen.py ADDR PROTO_DIR OUT_DIR MARKER
"""
import sys

from grpc_tools import protoc


def main() -> None:
    addr, proto_dir, out_dir, marker = sys.argv[1:5]
    import grpc_tools

    well_known = grpc_tools.__path__[0] + "/_proto"
    rc = protoc.main([
        "protoc", f"-I{proto_dir}", f"-I{well_known}",
        f"--python_out={out_dir}", f"--grpc_python_out={out_dir}",
        "toolsched/v1/toolsched.proto",
    ])
    if rc != 0:
        raise SystemExit(f"protoc failed with {rc}")
    sys.path.insert(0, out_dir)

    import grpc
    from toolsched.v1 import toolsched_pb2 as pb
    from toolsched.v1 import toolsched_pb2_grpc as rpc

    channel = grpc.insecure_channel(addr)
    stub = rpc.ToolSchedulerStub(channel)
    request = pb.ScheduleCallsRequest(session_id="frozen", approval_mode=pb.APPROVAL_MODE_YOLO)
    c = request.calls.add(id="long", name="run_shell_command")
    c.args.update({"command": f"trap 'echo terminated > {marker}; exit 143' TERM; sleep 600 & wait"})
    try:
        for event in stub.ScheduleCalls(request):
            if event.WhichOneof("event") == "call_update":
                u = event.call_update
                if u.WhichOneof("state") == "executing" and u.executing.pid:
                    print(f"executing {u.executing.pid}", flush=True)
            elif event.WhichOneof("event") == "batch_completed":
                print("completed", flush=True)
                return
    except grpc.RpcError as e:
        print(f"stream failed: {e.code().name}", flush=True)
        return
    print("stream ended without BatchCompleted", flush=True)


if __name__ == "__main__":
    main()
