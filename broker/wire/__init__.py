"""The wire layer, sans IO: framing and the batch format, shared by server and client."""
