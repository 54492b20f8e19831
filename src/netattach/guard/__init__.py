"""The delegate guard: what a NetworkAttachmentDefinition's config may make netattach run, as
pure rules (SEC-DELEGATE, SEC-KEYS, SEC-NODE, SEC-VALUES), and the same rules as an admission
policy (SEC-ADMISSION)."""
