"""`openblox mcp`: a Model Context Protocol server over the client (docs/mcp.md).

Named `agent_tools`, not `mcp`, so that inside it `import mcp` is the SDK. Only the
command line imports it, and only for `openblox mcp`: the SDK is the `mcp` extra, which
the operator image does not install.
"""
