from django.apps import AppConfig


class InstancesConfig(AppConfig):
    name = "instances"
    verbose_name = "Instances"

    def ready(self) -> None:
        from instances.backends import register_backend
        from instances.manifests.builtin import builtin_kinds_register
        from instances.services.clusters import kubevirt_backend

        register_backend("kubevirt", kubevirt_backend)
        builtin_kinds_register()
