"""The shim as a subprocess, in each form it ships in, against a stub daemon socket."""
