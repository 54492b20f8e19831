"""The pod operations: ADD, CHECK, DEL, GC, STATUS and hot-plug, the same in the thin plugin (in
the process the runtime executes) and in the daemon (behind the shim's socket)."""
