# Two waves in one apply: the databases first, then the application servers
# that use them. The app servers are shut down and migrated only after every
# database migration is Completed (its VM running on KubeVirt and its checks
# passed), so the applications never run against a database that is down.
# If a database migration stops, the apply ends with its error and no app
# server has been touched; fix the cause and apply again.
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

locals {
  # Both waves are migrated the same way; only the VMs and the order differ.
  waves = {
    databases = var.database_regex
    apps      = var.app_regex
  }
}

data "vmmigration_esxi_vms" "wave" {
  for_each = local.waves

  host       = "esxi-a"
  name_regex = each.value
}

locals {
  # "<wave>/<destination name>" => VM, the name made a valid Kubernetes name.
  vms = merge([
    for wave, inv in data.vmmigration_esxi_vms.wave : {
      for vm in inv.vms : "${wave}/${trim(lower(replace(vm.name, "/[^a-zA-Z0-9-]+/", "-")), "-")}" => vm
      if !vm.system && vm.name != ""
    }
  ]...)
}

# Pre-flight checks for both waves, at plan time: a blocker in the second
# wave shows in the plan before the first wave powers anything off.
data "vmmigration_preflight" "vm" {
  for_each = local.vms

  host             = "esxi-a"
  vmid             = each.value.vmid
  namespace        = var.namespace
  name             = split("/", each.key)[1]
  storage_class    = var.storage_class
  power_off_policy = "graceful_then_hard"
  conversion       = var.conversion
  network_map      = var.network_map
}

locals {
  # Destination name => VM, for the VMs of a wave whose checks passed.
  ready = {
    for wave in keys(local.waves) : wave => {
      for key, vm in local.vms : split("/", key)[1] => vm
      if startswith(key, "${wave}/") && data.vmmigration_preflight.vm[key].passed
    }
  }
}

# Wave 1: the databases.
resource "vmmigration_migration" "databases" {
  for_each = local.ready["databases"]

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
      "migration-wave" = "1-databases"
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

  # A database counts as migrated once its guest is up and has an address.
  validation = {
    guest_agent = true
    ip_reported = true
  }
}

# Wave 2: the application servers, once every database is Completed.
# depends_on is on the resources only: the pre-flight data sources above must
# not wait for wave 1, or their results (and so this for_each) would be
# unknown until apply.
resource "vmmigration_migration" "apps" {
  for_each   = local.ready["apps"]
  depends_on = [vmmigration_migration.databases]

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
      "migration-wave" = "2-apps"
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
  description = "VMs the pre-flight checks refused (\"<wave>/<name>\"), with what to fix."
  value       = { for key, check in data.vmmigration_preflight.vm : key => check.blockers if !check.passed }
}

output "migrated" {
  description = "Phase of every migration, by wave."
  value = {
    databases = { for name, m in vmmigration_migration.databases : name => m.phase }
    apps      = { for name, m in vmmigration_migration.apps : name => m.phase }
  }
}
