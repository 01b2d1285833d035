"""What IT defines: fabrics with their capacity, queues with ordered targets, quotas per team."""
