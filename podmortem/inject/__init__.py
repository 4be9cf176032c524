"""What podmortem puts into a training container when asked to: an opt-in Python start-up hook.

`sitecustomize.py` here is not imported by podmortem itself: it is copied (`python -m podmortem.inject
DIR`, the webhook's `podmortem-python` init container) to a directory the training container puts first on
its `PYTHONPATH`, where every Python process of that container imports it at start-up (the `site`
module's `sitecustomize` hook), the way APM agents instrument a program without changing it.
"""
