# Adopt migrations done earlier (by a configuration whose state is lost, or
# by another team's workspace) into this configuration, without migrating
# anything again. Each import block names a migration by its destination,
# "<namespace>/<name>"; its state is rebuilt from the migration record and
# the cluster. Write the resource as the migration was configured (these are
# the settings of examples/single): `terraform plan` then shows only the
# imports, "0 to add, 0 to change, 0 to destroy", and after `terraform apply`
# the plan is empty.
#
# for_each in import blocks needs Terraform 1.7 or later. With Terraform 1.5
# or 1.6, write one import block per VM with a literal id, for example
#   import {
#     to = vmmigration_migration.adopted["web-01"]
#     id = "apps/web-01"
#   }
terraform {
  required_version = ">= 1.7"
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

import {
  for_each = var.migrated

  to = vmmigration_migration.adopted[each.key]
  id = "${var.namespace}/${each.key}"
}

resource "vmmigration_migration" "adopted" {
  for_each = var.migrated

  source = {
    host    = "esxi-a"
    vm_name = each.value.vm_name
  }

  destination = {
    namespace     = var.namespace
    name          = each.key
    storage_class = var.storage_class
    network_map   = var.network_map
    run_strategy  = "Always"
    labels = {
      "migrated-from" = "esxi-a"
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
    timeout     = "15m"
  }

  delete_policy = "keep"
}

output "adopted" {
  description = "Each adopted migration: phase, VirtualMachine UID and when it completed."
  value = {
    for name, m in vmmigration_migration.adopted : name => {
      phase     = m.phase
      vm_uid    = m.vm_uid
      completed = lookup(m.timestamps, "completed", null)
    }
  }
}
