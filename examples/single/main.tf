# Migrate one VM from ESXi to KubeVirt: shut the guest down through VMware
# Tools (hard power-off if it takes longer than shutdown_timeout), copy and
# hash its disks, import them through CDI's upload proxy, start it on KubeVirt
# with its MAC addresses, and only call it Completed once the guest agent is
# connected and the VM reports an IP address.
terraform {
  required_version = ">= 1.5"
  required_providers {
    vmmigration = { source = "vmmigration/vmmigration" }
  }
}

provider "vmmigration" {
  work_dir = var.work_dir

  esxi_host {
    name                 = "esxi-a"
    address              = var.esxi_address
    port                 = var.esxi_port
    user                 = var.esxi_user
    password             = var.esxi_password
    host_key_fingerprint = var.esxi_fingerprint
  }

  kubernetes {
    config_path    = var.kubeconfig
    config_context = var.kube_context
  }
}

resource "vmmigration_migration" "vm" {
  source = {
    host    = "esxi-a"
    vm_name = var.vm_name
  }

  destination = {
    namespace     = var.namespace
    name          = var.vm_name
    storage_class = var.storage_class
    network_map   = var.network_map
    run_strategy  = "Always"
    labels = {
      "migrated-from" = "esxi-a"
    }
  }

  # Ask the guest to shut down; power it off hard only after the timeout.
  # The power-off happens after the pre-flight checks pass, once.
  power_off_policy = "graceful_then_hard"
  conversion       = var.conversion
  shutdown_timeout = var.shutdown_timeout

  transport = {
    upload_proxy_url            = var.upload_proxy_url
    upload_proxy_ca_certificate = var.upload_proxy_ca_certificate
    upload_proxy_server_name    = var.upload_proxy_server_name
  }

  # Completed means the guest is up: the QEMU guest agent connects and the
  # VMI reports an IP address within 15 minutes.
  validation = {
    guest_agent = true
    ip_reported = true
    timeout     = "15m"
  }

  # Destroying this resource later keeps the migrated VM (the default).
  delete_policy = "keep"
}

output "phase" {
  value = vmmigration_migration.vm.phase
}

output "vm" {
  description = "The migrated VM and what was copied."
  value = {
    id               = vmmigration_migration.vm.id
    vm_uid           = vmmigration_migration.vm.vm_uid
    power_off_action = vmmigration_migration.vm.power_off_action
    disks = [for d in vmmigration_migration.vm.disks : {
      data_volume   = d.data_volume
      size_bytes    = d.size_bytes
      source_sha256 = d.source_sha256
    }]
  }
}
