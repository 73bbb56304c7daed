R=$PWD; cd .branches/head && ln -sfn $R/.whl .whl; export PYTHONPATH=$PWD/src; O=$OUT/c2; mkdir -p $O
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1); echo "ncu=$ncu"; $ncu --version | tail -1
$ncu --help > $O/ncu-help.txt 2>&1
export FLASHTILE_GLUON_FWD=1
for p in "128 512 --causal" "64 4096 " "64 1024 --causal"; do
  set -- $p; tag=d$1-$2${3:+-causal}
  timeout 120 $ncu --profile-from-start off --clock-control none --section SourceCounters --section WarpStateStats \
     --import-source no -f -o $O/src-$tag python3 scripts/pipe_profile.py --provider flashtile --mode fwd --d $1 --seqlen $2 $3 > $O/ncu-$tag.log 2>&1 || tail -5 $O/ncu-$tag.log
  timeout 60 $ncu --import $O/src-$tag.ncu-rep --page source --print-source sass --csv > $O/sass-$tag.csv 2> $O/sass-$tag.err || { tail -3 $O/sass-$tag.err; }
  timeout 60 $ncu --import $O/src-$tag.ncu-rep --page details --csv > $O/details-$tag.csv 2>/dev/null
  ls -la $O/sass-$tag.csv; head -c 600 $O/sass-$tag.csv; echo
done
cd $OUT && tar czf c2.tgz c2 && rm -rf c2; ls -la $OUT
