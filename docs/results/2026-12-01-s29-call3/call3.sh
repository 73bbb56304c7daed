# session 29, call 3: issue 7's other shapes (d=96/128/256 and GQA 8, vs cuDNN, same run) on
# main after sessions 24-28's forward changes (last measured in session 23)
export PYTHONPATH=$PWD/src; O=$OUT
( OUT=$O/h; HD_SEQLENS=1k,4k,16k timeout 560 bash scripts/gpu_session.sh headdims ) > $O/h.log 2>&1
tail -45 $O/h.log
