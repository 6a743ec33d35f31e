"""GitOps: a project follows a git repository, and each sync applies the manifests found on
its branch (git.py reads the repository, sync.py applies and records, drift.py compares the
console with what the last sync applied, services.py connects sources and queues syncs)."""
