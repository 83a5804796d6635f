"""Sends requests the server cannot decode, as raw bytes, and prints the
status codes and messages it answers with, as JSON.

Usage: malformed.py ADDR
"""
import json
import sys

import grpc


def call(channel, payload: bytes):
    method = channel.unary_stream(
        "/toolsched.v1.ToolScheduler/ScheduleCalls",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    try:
        for _ in method(payload):
            pass
        return {"code": "OK", "message": ""}
    except grpc.RpcError as e:
        return {"code": e.code().name, "message": e.details()}


def main() -> None:
    channel = grpc.insecure_channel(
        sys.argv[1], options=[("grpc.max_send_message_length", 64 << 20)]
    )
    # session_id (field 1, length-delimited) holding bytes that are not UTF-8.
    bad_utf8 = bytes([0x0A, 0x02, 0xFF, 0xFE])
    # session_id of 5 MiB: over the default 4 MiB request limit.
    big = b"y" * (5 << 20)
    n = len(big)
    varint = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        varint.append(byte | (0x80 if n else 0))
        if not n:
            break
    oversized = bytes([0x0A]) + bytes(varint) + big
    print(json.dumps({"bad_utf8": call(channel, bad_utf8), "oversized": call(channel, oversized)}))


if __name__ == "__main__":
    main()
