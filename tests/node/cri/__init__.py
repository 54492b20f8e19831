"""A CRI v1 client of the pod sandbox calls (tests/node): `api.proto` and its Python side."""
