# A server started as a TAP test starts one (PostgreSQL::Test::Cluster, whose
# pg_ctl puts it in a session of its own), for scripts/interrupt_check.sh:
# writes the node's data directory to the file named by its argument, then
# waits to be killed, as a test interrupted part way would.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;

my $ready = shift or die "usage: hold_node.pl READY_FILE\n";
my $node = PostgreSQL::Test::Cluster->new('held');
$node->init;
$node->start;
open my $fh, '>', "$ready.part" or die "$ready.part: $!";
print $fh $node->data_dir, "\n";
close $fh;
rename "$ready.part", $ready or die "$ready: $!";
sleep 3600 while 1;
