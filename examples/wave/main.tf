# A migration wave: every VM of host esxi-a whose name matches name_regex is
# checked without touching anything, and the VMs whose pre-flight checks pass
# are migrated; the others are listed in the `skipped` output with the
# reason, and join a later apply once fixed. However high Terraform's
# -parallelism, at most max_concurrent_migrations migrations read from the
# host at once (discovery, power-off, disk copy); conversion, import and
# start-up of the others go on meanwhile.
terraform {
  required_version = ">= 1.5"
  required_providers {
    vmmigration = { source = "vmmigration/vmmigration" }
  }
}

provider "vmmigration" {
  work_dir = var.work_dir

  esxi_host {
    name                      = "esxi-a"
    address                   = var.esxi_address
    port                      = var.esxi_port
    user                      = var.esxi_user
    password                  = var.esxi_password
    host_key_fingerprint      = var.esxi_fingerprint
    max_concurrent_migrations = var.max_concurrent_migrations
  }

  kubernetes {
    config_path    = var.kubeconfig
    config_context = var.kube_context
  }
}

# The wave: the host's inventory, read in a few SSH round trips.
data "vmmigration_esxi_vms" "wave" {
  host       = "esxi-a"
  name_regex = var.name_regex
}

locals {
  # Keyed by destination name: the display name made a valid Kubernetes name
  # ("Web 01 (prod)" becomes "web-01-prod"). Two VMs that end up with the
  # same key fail the plan: rename one, or migrate it by vmid on its own.
  # System VMs (vCLS) are never migrated, and an invalid VM (its files are
  # gone) has no name to migrate it by.
  vms = {
    for vm in data.vmmigration_esxi_vms.wave.vms :
    trim(lower(replace(vm.name, "/[^a-zA-Z0-9-]+/", "-")), "-") => vm
    if !vm.system && vm.name != ""
  }
}

# Pre-flight checks for every VM of the wave: snapshots, unmapped networks,
# unsupported disks, a destination name already taken, missing StorageClass,
# and more. Reading them changes nothing.
data "vmmigration_preflight" "wave" {
  for_each = local.vms

  host             = "esxi-a"
  vmid             = each.value.vmid
  namespace        = var.namespace
  name             = each.key
  storage_class    = var.storage_class
  power_off_policy = "graceful_then_hard"
  conversion       = var.conversion
  network_map      = var.network_map
}

# The gate: only VMs whose checks passed are migrated.
resource "vmmigration_migration" "wave" {
  for_each = {
    for name, check in data.vmmigration_preflight.wave : name => local.vms[name] if check.passed
  }

  source = {
    host = "esxi-a"
    vmid = each.value.vmid
  }

  destination = {
    namespace     = var.namespace
    name          = each.key
    storage_class = var.storage_class
    network_map   = var.network_map
    labels = {
      "migration-wave" = "web"
    }
  }

  power_off_policy = "graceful_then_hard"
  conversion       = var.conversion
  shutdown_timeout = var.shutdown_timeout

  transport = {
    upload_proxy_url            = var.upload_proxy_url
    upload_proxy_ca_certificate = var.upload_proxy_ca_certificate
    upload_proxy_server_name    = var.upload_proxy_server_name
  }

  validation = {
    guest_agent = true
    ip_reported = true
  }
}

output "skipped" {
  description = "VMs of the wave that the pre-flight checks refused, with what to fix."
  value       = { for name, check in data.vmmigration_preflight.wave : name => check.blockers if !check.passed }
}

output "migrated" {
  description = "Each migrated VM: phase, how the source was powered off, and its DataVolumes."
  value = {
    for name, m in vmmigration_migration.wave : name => {
      phase        = m.phase
      power_off    = m.power_off_action
      vm_uid       = m.vm_uid
      data_volumes = [for d in m.disks : d.data_volume]
    }
  }
}
