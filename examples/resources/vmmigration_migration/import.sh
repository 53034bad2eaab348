# A migration is imported by its destination: <namespace>/<name>.
terraform import vmmigration_migration.web01 apps/web-01
