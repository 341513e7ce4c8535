"""The dashboard's tabs. Each view has ``refresh_view(frame)``, called by the app's refresh timer only while the
view's tab is visible, inside ``App.batch_update()``."""


def unchanged(view: object, signature: tuple) -> bool:
    """True when ``signature`` (what the view's picture depends on) equals the one of its last redraw; records it
    otherwise. Lets the 5 Hz refresh skip views whose data did not move (a paused replay, a snapshot between
    its 2 Hz updates) instead of rebuilding the same picture."""
    if getattr(view, "_signature", None) == signature:
        return True
    view._signature = signature
    return False


def frame_key(frame) -> tuple:
    """What every view depends on besides its own data: store generation, cursor, x mode, pool choice, gate."""
    return (frame.sessions.generation, len(frame.sessions.sessions), frame.cursor, frame.x_mode, frame.pool_name,
            frame.gate)
