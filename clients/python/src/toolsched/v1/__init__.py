"""Code generated from ``proto/toolsched/v1/toolsched.proto`` by grpcio-tools
(``tools/gen_proto.py``; a test checks it matches the proto). Use it for what
the typed client does not cover; its messages are the wire contract."""
