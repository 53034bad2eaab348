# A root module for a GitOps pipeline: a pull request that adds VMs to
# var.migrations gets `terraform plan` as its review (the DataVolumes each
# migration creates, the bytes to copy, and every pre-flight blocker as a plan
# error that names the fix), and the merge applies exactly the reviewed plan.
# See README.md for the pipeline.
#
# There is no backend block: the pipeline adds its own (for example a
# backend.tf with `terraform { backend "s3" {} }` and -backend-config at
# init), so the same module runs locally with a local state.
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
    password                  = var.esxi_password # from the pipeline's secret store: TF_VAR_esxi_password
    host_key_fingerprint      = var.esxi_fingerprint
    max_concurrent_migrations = var.max_concurrent_migrations
  }

  kubernetes {
    config_path    = var.kubeconfig
    config_context = var.kube_context
  }
}

# One migration per entry. At plan time each new migration runs the
# pre-flight checks against the host and the cluster: a blocker (a snapshot,
# an unmapped network, a destination name taken, ...) fails the plan, so the
# pull request cannot be merged until it is fixed, and a failed warning
# shows in the plan output for the reviewer.
resource "vmmigration_migration" "vm" {
  for_each = var.migrations

  source = {
    host    = "esxi-a"
    vm_name = each.value.vm_name
  }

  destination = {
    namespace     = var.namespace
    name          = each.key
    storage_class = var.storage_class
    network_map   = var.network_map
    run_strategy  = each.value.run_strategy
    labels        = merge({ "managed-by" = "gitops" }, each.value.labels)
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

  # Removing an entry forgets the migration and keeps the migrated VM.
  delete_policy = "keep"
}

output "migrations" {
  description = "Each migration: phase, VirtualMachine UID and DataVolumes."
  value = {
    for name, m in vmmigration_migration.vm : name => {
      phase        = m.phase
      vm_uid       = m.vm_uid
      data_volumes = [for d in m.disks : d.data_volume]
    }
  }
}
