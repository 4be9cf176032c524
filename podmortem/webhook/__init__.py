"""The sidecar injection webhook: puts the podmortem sidecar into training pods as they are created.

`mutation` is the pure part (a Pod in, JSONPatch operations out), `config` reads the settings in one
place, `server` is the HTTPS admission endpoint (`podmortem webhook`). This package imports nothing
else from podmortem, so the webhook stays small and its process does not load the engine.
"""
