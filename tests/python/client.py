"""A Python grpcio client of toolsched, as an agent frontend in another
language would write it: generate stubs from proto/, send a batch, answer the
approval prompt with Confirm, print the function responses as JSON.

Usage: client.py ADDR PROTO_DIR OUT_DIR
"""
import json
import sys

from grpc_tools import protoc


def main() -> None:
    addr, proto_dir, out_dir = sys.argv[1:4]
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
    from google.protobuf import json_format
    from toolsched.v1 import toolsched_pb2 as pb
    from toolsched.v1 import toolsched_pb2_grpc as rpc

    channel = grpc.insecure_channel(addr)
    stub = rpc.ToolSchedulerStub(channel)
    request = pb.ScheduleCallsRequest(session_id="py", interactive=True)
    read = request.calls.add(id="r", name="read_file")
    read.args.update({"file_path": "hello.txt"})
    write = request.calls.add(id="w", name="write_file")
    write.args.update({"file_path": "from_python.txt", "content": "written by python\n"})

    states = []
    responses = []
    for event in stub.ScheduleCalls(request):
        kind = event.WhichOneof("event")
        if kind == "call_update":
            u = event.call_update
            state = u.WhichOneof("state")
            states.append(f"{u.call_id}:{state}")
            if state == "awaiting_approval":
                stub.Confirm(pb.ConfirmRequest(
                    session_id="py", call_id=u.call_id,
                    correlation_id=u.awaiting_approval.correlation_id,
                    outcome=pb.CONFIRMATION_OUTCOME_PROCEED_ONCE,
                ))
        elif kind == "batch_completed":
            responses = [json_format.MessageToDict(r) for r in event.batch_completed.responses]
    print(json.dumps({"states": states, "responses": responses}))


if __name__ == "__main__":
    main()
