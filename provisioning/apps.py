from django.apps import AppConfig


class ProvisioningConfig(AppConfig):
    name = "provisioning"
    verbose_name = "Provisioning"

    def ready(self) -> None:
        from instances.names import register_name_check
        from provisioning import checks  # noqa: F401  (registers them)
        from provisioning.clouds import register_vm_backends
        from provisioning.manifests import provisioning_kind_register
        from provisioning.space import vm_name_promised

        register_vm_backends()
        register_name_check(vm_name_promised)
        provisioning_kind_register()
