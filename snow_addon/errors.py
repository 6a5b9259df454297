"""Errors the engine raises for bad input: each names the setting and a value that works."""


class SnowInputError(ValueError):
    """Bad user input. ``setting`` names what to change, ``suggestion`` a value that works.

    Raised before anything is allocated or written, so the caller's state is unchanged.
    """

    def __init__(self, setting: str, problem: str, suggestion: str = ""):
        self.setting = setting
        self.problem = problem
        self.suggestion = suggestion
        text = f"{setting}: {problem}"
        if suggestion:
            text += f" (try {suggestion})"
        super().__init__(text)


class SnowMemoryError(SnowInputError):
    """The requested sizes do not fit in the memory of the chosen device."""

    def __init__(self, setting: str, problem: str, suggestion: str = "", needed_bytes: int = 0,
                 available_bytes: int = 0):
        super().__init__(setting, problem, suggestion)
        self.needed_bytes = needed_bytes
        self.available_bytes = available_bytes
