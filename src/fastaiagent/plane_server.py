"""The spec's import path for the self-hosted plane (it lives in
:mod:`fastaiagent.plane.server`)."""

from fastaiagent.plane.server import RunningPlane, create_plane_app, start_plane

__all__ = ["RunningPlane", "create_plane_app", "start_plane"]
