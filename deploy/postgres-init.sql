-- One server, one database per service. Runs once, on an empty data volume.
CREATE DATABASE prefect;
CREATE DATABASE labelstudio;
