# The demo wave: every VM on the simulated host is checked before anything is
# touched. `make demo` fills in the variables.
terraform {
  required_providers {
    vmmigration = { source = "vmmigration/vmmigration" }
  }
}

variable "esxi_address" { type = string }
variable "esxi_port" { type = number }
variable "esxi_fingerprint" { type = string }
variable "kubeconfig" { type = string }
variable "kube_context" { type = string }
variable "work_dir" { type = string }
variable "esxi_password" {
  type      = string
  sensitive = true
}

provider "vmmigration" {
  work_dir = var.work_dir

  esxi_host {
    name                      = "esxi-demo"
    address                   = var.esxi_address
    port                      = var.esxi_port
    password                  = var.esxi_password
    host_key_fingerprint      = var.esxi_fingerprint
    max_concurrent_migrations = 2
  }

  kubernetes {
    config_path    = var.kubeconfig
    config_context = var.kube_context
  }
}

data "vmmigration_esxi_vms" "wave" {
  host = "esxi-demo"
}

locals {
  vms = { for vm in data.vmmigration_esxi_vms.wave.vms : vm.name => vm }
}

data "vmmigration_preflight" "wave" {
  for_each = local.vms

  host             = "esxi-demo"
  vmid             = each.value.vmid
  namespace        = "migrated"
  name             = each.key
  storage_class    = "standard"
  power_off_policy = "graceful_then_hard"
  network_map      = { for n in each.value.nics : n.network_name => "pod" }
}

output "inventory" {
  value = {
    for name, vm in local.vms : name => {
      firmware = vm.secure_boot ? "${vm.firmware}+secureboot" : vm.firmware
      power    = vm.power_state
      disks    = [for d in vm.disks : "${d.device} ${d.capacity_bytes / 1048576} MiB"]
    }
  }
}

output "preflight" {
  value = {
    for name, p in data.vmmigration_preflight.wave : name => {
      passed   = p.passed
      blockers = p.blockers
      warnings = p.warnings
      copy_mib = p.total_bytes / 1048576
    }
  }
}
