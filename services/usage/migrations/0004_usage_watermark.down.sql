DROP TABLE IF EXISTS usage_watermark_cut;
