"""test/service.py for kafka-python's test suite, which its sdist leaves out: the fixtures
import it, and use only ExternalService when KAFKA_URI names a running broker, as here."""


class ExternalService:
    def __init__(self, host, port):
        self.host = host
        self.port = port

    def open(self):
        pass

    def close(self):
        pass

    def start(self):
        pass

    def stop(self):
        pass

    def dump_logs(self):
        pass

    def wait_for(self, pattern, timeout=30):
        return True


class SpawnedService:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("kaas runs kafka-python's integration tests against a running broker (KAFKA_URI) only")
