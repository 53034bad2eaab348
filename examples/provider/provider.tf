# Two ESXi hosts, one pinned by fingerprint with a password from the
# environment ($VMMIGRATION_ESXI_PASSWORD), one with a key and known_hosts.
provider "vmmigration" {
  work_dir = "/var/lib/vmmigration"

  esxi_host {
    name                      = "esxi-a"
    address                   = "esxi-a.example.com"
    user                      = "root"
    host_key_fingerprint      = "SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s"
    max_concurrent_migrations = 2
  }

  esxi_host {
    name             = "esxi-b"
    address          = "10.20.0.12"
    user             = "migration"
    private_key      = file("~/.ssh/esxi_ecdsa")
    known_hosts_file = "~/.ssh/known_hosts"
  }

  # Same settings as the hashicorp/kubernetes provider; without this block
  # $KUBECONFIG or ~/.kube/config is used.
  kubernetes {
    config_path    = "~/.kube/config"
    config_context = "kubevirt-prod"
  }
}
