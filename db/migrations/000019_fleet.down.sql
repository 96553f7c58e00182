DROP TABLE fleet_replicas;
