"""Domain errors raised by topics and channels; the adapters turn them into NSQ's errors."""


class BrokerError(Exception):
    """Base of the broker's domain errors; ``str(err)`` is NSQ's wording."""


class QueueFull(BrokerError):
    """No room to accept a message without dropping one."""


class Exiting(BrokerError):
    """The topic or channel is being deleted (nsqd: ``exiting``)."""

    def __init__(self) -> None:
        super().__init__("exiting")


class InFlightError(BrokerError):
    """FIN/REQ/TOUCH of a message that is not in flight for this client."""


class TooManyConsumers(BrokerError):
    """``--max-channel-consumers`` reached."""
