from django.apps import AppConfig


class InstancesConfig(AppConfig):
    name = "instances"
    verbose_name = "Instances"

    def ready(self) -> None:
        from instances.backends import register_backend
        from instances.services.clusters import kubevirt_backend

        register_backend("kubevirt", kubevirt_backend)
