"""Errors the engine raises for bad input, and when a run leaves the range its model holds:
each names the setting to change and a value that works."""


class _NamesTheSetting(Exception):
    """An error that names the setting to change (``setting``), what is wrong with it
    (``problem``) and a value that works (``suggestion``)."""

    def __init__(self, setting: str, problem: str, suggestion: str = ""):
        self.setting = setting
        self.problem = problem
        self.suggestion = suggestion
        text = f"{setting}: {problem}"
        if suggestion:
            text += f" (try {suggestion})"
        super().__init__(text)


class SnowInputError(_NamesTheSetting, ValueError):
    """Bad user input. ``setting`` names what to change, ``suggestion`` a value that works.

    Raised before anything is allocated or written, so the caller's state is unchanged.
    """


class SnowMemoryError(SnowInputError):
    """The requested sizes do not fit in the memory of the chosen device."""

    def __init__(self, setting: str, problem: str, suggestion: str = "", needed_bytes: int = 0,
                 available_bytes: int = 0):
        super().__init__(setting, problem, suggestion)
        self.needed_bytes = needed_bytes
        self.available_bytes = available_bytes


class SnowSimulationError(_NamesTheSetting, RuntimeError):
    """The simulation left the range its model holds while it ran (Simulation.check_health):
    ``setting`` names what to change, ``suggestion`` values that keep it in range. What was
    baked before it is kept; the state that failed the check is not written."""
